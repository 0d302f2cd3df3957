"""The job mix from Slurm's accounting: `hpcai-launch slurm mix` (and `plan --mix-from-sacct`).

One sacct call lists a partition's job allocations since a date:

    sacct --parsable2 --noheader --allocations --allusers -S DATE -E now -r PARTITION
          --format JobID,JobName,Account,QOS,Partition,AllocTRES,ElapsedRaw,State

A job's GPU-hours are its AllocTRES gres/gpu count times its elapsed time.
Each job gets the class of the site's first matching `[[classes]]` rule
(launcher/site/policy.py); a class's share is its part of the classified
GPU-hours. The mix (the TOML of the formats agreed for `plan --mix`) is
written for the user to edit: what matched no rule is said in its comments.
"""
from __future__ import annotations

import datetime
import re
import shutil

from hpcai.errors import SlurmError, UsageError

SACCT_FIELDS = ("JobID", "JobName", "Account", "QOS", "Partition", "AllocTRES", "ElapsedRaw", "State")
_PARTITION = re.compile(r"^[A-Za-z0-9._-]+$")
SHARE_DIGITS = 4


def sacct_args(since: str, partition: str) -> list[str]:
    """sacct's arguments, after checking both values (one line, exit 2)."""
    try:
        datetime.datetime.fromisoformat(since)
    except ValueError:
        raise UsageError(f"--since {since!r} is not a date", "give YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]") from None
    if not _PARTITION.match(partition):
        raise UsageError(f"--partition {partition!r} is not a partition name", "give one name, as sinfo shows it")
    return ["--parsable2", "--noheader", "--allocations", "--allusers", "-S", since, "-E", "now",
            "-r", partition, "--format", ",".join(SACCT_FIELDS)]


def gpus_of(alloc_tres: str) -> int:
    """GPUs in an AllocTRES ("cpu=8,gres/gpu=4,mem=64G,node=1" -> 4): the untyped
    gres/gpu count, else the sum of typed ones (gres/gpu:h100=4); 0 without any."""
    counts = dict(item.split("=", 1) for item in alloc_tres.split(",") if "=" in item)
    if "gres/gpu" in counts:
        return int(counts["gres/gpu"])
    return sum(int(v) for k, v in counts.items() if k.startswith("gres/gpu:"))


def parse_sacct(text: str) -> list[dict]:
    """One dict per allocation line of sacct_args' output, with gpu_hours."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(SACCT_FIELDS):
            raise SlurmError(f"sacct line {number} has {len(values)} fields, not {len(SACCT_FIELDS)}: {line[:80]!r}",
                             "a job name with '|' in it breaks --parsable2; rename that job")
        job = dict(zip(SACCT_FIELDS, values))
        try:
            job["gpu_hours"] = gpus_of(job["AllocTRES"]) * int(job["ElapsedRaw"] or 0) / 3600.0
        except ValueError:
            raise SlurmError(f"sacct line {number}: unreadable AllocTRES or ElapsedRaw: {line[:80]!r}") from None
        jobs.append(job)
    return jobs


def mix_of(jobs: list[dict], classes: list[dict], partition: str) -> tuple[dict, dict]:
    """(the mix, {class or None: [jobs, GPU-hours]}): shares of the classified GPU-hours."""
    from hpcai.launcher.site.policy import job_class, job_fields

    if not classes:
        raise UsageError("the site file has no [[classes]] rules to sort jobs into classes",
                         "add [[classes]] rules (name, workload, job_name/account/qos globs) to the site file")
    tally: dict = {}
    for job in jobs:
        name = job_class(classes, job_fields(job["JobName"], job["Account"], job["QOS"]))
        entry = tally.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += job["gpu_hours"]
    hours = {name: h for name, (_, h) in tally.items() if name is not None and h > 0}
    if not hours:
        raise UsageError(f"no GPU-hours of partition {partition} in sacct match a [[classes]] rule "
                         f"({len(jobs)} job(s) found)", "check --since, --partition and the site's [[classes]] globs")
    workloads = {rule["name"]: rule["workload"] for rule in classes}
    shares = _shares(hours)
    mix = {"default_partition": partition,
           "class": [{"name": name, "workload": workloads[name], "share": shares[name], "partition": partition}
                     for name in sorted(hours, key=lambda n: (-hours[n], n))]}
    return mix, tally


def _shares(hours: dict[str, float]) -> dict[str, float]:
    """Each class's part, rounded to SHARE_DIGITS, the largest taking the rounding so they sum to 1."""
    total = sum(hours.values())
    shares = {name: round(h / total, SHARE_DIGITS) for name, h in hours.items()}
    largest = max(hours, key=lambda n: (hours[n], n))
    shares[largest] = round(1.0 - sum(s for n, s in shares.items() if n != largest), SHARE_DIGITS)
    return shares


def mix_from_sacct(site: dict, since: str, partition: str) -> tuple[dict, dict]:
    """Run sacct for the partition since the date and sort its jobs with the site's classes."""
    from hpcai.launcher.slurm import commands

    args = sacct_args(since, partition)
    if shutil.which("sacct") is None:  # commands.require's hint is --slurm's
        raise SlurmError("`sacct` is not on PATH, and the mix comes from Slurm's accounting",
                         "run this on a login node of the cluster (or load its Slurm module)")
    try:
        text = commands.accounting(args)
    except SlurmError as exc:
        if "accounting storage is disabled" in exc.message:
            raise SlurmError(f"{exc.message}: this cluster keeps no job accounting",
                             "sacct needs AccountingStorageType=accounting_storage/slurmdbd; "
                             "or write the mix by hand (docs: the job mix)") from None
        raise
    return mix_of(parse_sacct(text), site.get("classes", []), partition)


def mix_toml(mix: dict, tally: dict, since: str) -> str:
    """The mix as TOML, with what sacct counted in comments, for the user to edit."""
    from hpcai.launcher.cli.site_cli import _toml_value

    partition = mix["default_partition"]
    lines = [f"# From Slurm's accounting: partition {partition}, jobs since {since} (hpcai-launch slurm mix).",
             "# share: the class's part of the GPU-hours (AllocTRES gres/gpu x elapsed) of jobs a [[classes]]",
             "# rule of the site file matched. Edit as you like: shares of a partition must sum to 1."]
    for name, (count, hours) in sorted(tally.items(), key=lambda item: (item[0] is None, item[0] or "")):
        label = f"class {name}" if name is not None else "no class (matched no rule; left out)"
        lines.append(f"#   {label}: {count} job(s), {hours:.2f} GPU-hours")
    lines += ["", f"default_partition = {_toml_value(partition)}"]
    for entry in mix["class"]:
        lines += ["", "[[class]]"] + [f"{key} = {_toml_value(value)}" for key, value in entry.items()]
    return "\n".join(lines) + "\n"
