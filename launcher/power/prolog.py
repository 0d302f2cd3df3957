"""`hpcai-power-helper prolog` and `epilog`: the site's cap policy, applied by Slurm.

Run as root by slurmd (the scripts named by `Prolog=` and `Epilog=` in
slurm.conf; docs/how-to/power-helper.md). The job is SLURM_JOB_ID, which
slurmd sets; its partition, user, name, account, QOS and the GPUs it holds
on this node come from `scontrol show job -d`, never from the job's
environment. The policy is the `[policy]` section of the site file named by
the helper's settings (`site = ...`).

The prolog sets each of the job's GPUs to the policy's setting for the job's
partition and the GPU's model (a `[[classes]]` rule's override first, else
the partition's default), through the node's cap authority and the same job
record the helper leaves for a user's cap: a cap, or an override's SM clock
lock or power profile (launcher/power/job_knobs.py). So the user's own later
`hpcai-power-helper UUID W` (within the site's range) replaces a cap for the
job, and the epilog, which is `restore --job`, puts back the limit, clocks and
profiles the GPU had before the prolog.
"""
from __future__ import annotations

import os
import pwd
import re
import sys

from hpcai.errors import ConfigError, HpcaiError, PowerError, UsageError
from hpcai.gpu.base import LIMIT_MATCH_W
from hpcai.launcher.power import helper, job_knobs
from hpcai.launcher.power.authority import GpuAuthority, write_private_json
from hpcai.launcher.site.policy import SETTING_WORDS

# The lines of the scripts that slurm.conf's Prolog= and Epilog= name, as
# docs/how-to/power-helper.md shows them ({helper}: the console script's absolute path).
PROLOG_LINE = "{helper} prolog"
EPILOG_LINE = "{helper} epilog"
ANOTHER_JOB_HINT = "that job holds this GPU too; check its GRES"


def job_id_from_slurmd() -> str:
    """SLURM_JOB_ID as slurmd sets it for the prolog and epilog."""
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
        raise UsageError(f"SLURM_JOB_ID {job_id!r} is not a Slurm job id",
                         "run prolog and epilog from Slurm's Prolog= and Epilog= scripts, as root")
    return job_id


def policy_site(config: dict) -> dict | None:
    """The site file the helper's settings name, or None (no policy to apply)."""
    if not config.get("site"):
        return None
    from pathlib import Path

    from hpcai.launcher.site import config as sites

    path = Path(config["site"])
    if helper._trusted_file(path, "site file") is None:
        raise ConfigError(f"the site file {path} named in {helper.HELPER_CONFIG} does not exist")
    return sites.load(str(path))


def job_facts(config: dict, job_id: str) -> tuple[dict, str]:
    """The job's fields and its `scontrol show job -d -o` line."""
    out = helper.scontrol(config, "show", "job", "-d", "-o", job_id)
    line = out.splitlines()[0] if out.strip() else ""
    fields = helper._fields(line)
    if fields.get("JobId") != job_id:
        raise PowerError(f"Slurm does not describe job {job_id}")
    return fields, line


def _owner(fields: dict) -> tuple[int, str]:
    found = re.search(r"^(.*)\((\d+)\)$", fields.get("UserId", ""))
    if not found:
        raise PowerError(f"Slurm names no user for job {fields.get('JobId')}")
    uid = int(found.group(2))
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, found.group(1)


def apply_policy(job_id: str, config: dict) -> list[str]:
    """Cap the job's GPUs on this node as the site's policy says; one line per GPU."""
    from hpcai.gpu import open_library
    from hpcai.launcher.site.policy import job_class, job_fields, policy_entries

    site = policy_site(config)
    if site is None or not policy_entries(site):
        return [f"job {job_id}: no [policy] in the site file named by {helper.HELPER_CONFIG}"]

    fields, line = job_facts(config, job_id)
    held = helper.job_gpus_here(config, fields, helper.this_nodes(config), line)
    if held is not None and not held:
        return [f"job {job_id}: holds no GPU on this node"]
    class_name = job_class(site.get("classes", []), job_fields(fields.get("JobName"), fields.get("Account"),
                                                               fields.get("QOS")))
    library = open_library("auto")
    if library is None:
        raise PowerError("no GPU management library sees a GPU on this node")
    try:
        devices = [d for d in library.devices() if held is None or d.info().index in held]
        return [_apply_one(device, site, fields, class_name, config) for device in devices]
    finally:
        library.close()


def _apply_one(device, site: dict, fields: dict, class_name: str | None, config: dict) -> str:
    from hpcai.launcher.site.policy import setting_for
    from hpcai.measure.gpu_names import short_name

    info = device.info()
    partition, job_id = fields.get("Partition", ""), fields["JobId"]
    found = setting_for(site, partition, short_name(info.name), class_name)
    if found is None:
        return f"GPU {info.uuid}: the policy names no cap for partition {partition} on {short_name(info.name)}"
    setting, why = found
    ((kind, value),) = setting.items()
    if kind == "cap_w":
        cap_job(device, job_id, _owner(fields), value, config)
        return f"GPU {info.uuid}: power limit {value:g} W for Slurm job {job_id} ({why})"
    knob_job(device, job_id, _owner(fields), kind, value, config)
    what, unit = SETTING_WORDS[kind]
    shown = f"{value:g}" if isinstance(value, (int, float)) else value
    return f"GPU {info.uuid}: {what} {shown}{unit} for Slurm job {job_id} ({why})"


def knob_job(device, job_id: str, owner: tuple[int, str], kind: str, value, config: dict) -> None:
    """Lock one GPU's SM clock or request a power profile for a job, under the node's
    authority; the job record (written before the change) holds what the epilog's
    `restore --job` puts back (launcher/power/job_knobs.py)."""
    uuid, control = device.info().uuid, job_knobs.knob(device, kind)
    with GpuAuthority([uuid], f"slurm-job-{job_id}-prolog", wait_s=10.0, job_id=job_id) as authority:
        record = helper.job_record_unless_another_runs(uuid, job_id, config, ANOTHER_JOB_HINT)
        earlier = (record or {}).get(job_knobs.KNOB)
        control.check(value)
        # A record left by this job's earlier prolog, or by an ended job whose epilog
        # failed, holds the state from before it: that is what the epilog puts back.
        if earlier and earlier.get("kind") != kind:
            job_knobs.restore(device, earlier)
        before = earlier["restore"] if earlier and earlier.get("kind") == kind else control.snapshot()
        record = {**authority.holder_record(), "uid": owner[0], "user": owner[1], "set_by": "prolog",
                  job_knobs.KNOB: {"kind": kind, "restore": before}}
        write_private_json(helper._job_record_path(uuid), record)
        control.apply(value)


def cap_job(device, job_id: str, owner: tuple[int, str], watts: float, config: dict) -> None:
    """Set one GPU's limit for a job under the node's authority, recording the first
    holder's original and a job record naming the job's owner (as helper.set_limit does
    for a user's own cap), so that `restore --job` puts it back."""
    uuid, limits = device.info().uuid, device.power_limits()
    with GpuAuthority([uuid], f"slurm-job-{job_id}-prolog", wait_s=10.0, job_id=job_id) as authority:
        record = helper.job_record_unless_another_runs(uuid, job_id, config, ANOTHER_JOB_HINT)
        earlier = (record or {}).get(job_knobs.KNOB)
        if earlier:  # an ended job's clock lock or profile, its epilog failed: put back first
            job_knobs.restore(device, earlier)
        original = authority.original_w(uuid, limits.current_w)
        helper._check_range(watts, limits, config, original)
        device.set_power_limit_w(watts)
        got = device.power_limits().current_w
        if abs(got - watts) > LIMIT_MATCH_W:
            raise PowerError(f"GPU {uuid} reads {got:g} W after setting {watts:g} W")
        record = {**authority.holder_record(), "uid": owner[0], "user": owner[1], "set_by": "prolog"}
        write_private_json(helper._job_record_path(uuid), record)


def main(argv: list[str]) -> int:
    """`prolog` or `epilog`, no other arguments; as root, straight from slurmd."""
    try:
        if len(argv) != 1 or argv[0] not in ("prolog", "epilog"):
            raise UsageError(f"{argv[0]} takes no arguments (the job is SLURM_JOB_ID)")
        if helper._caller_uid() is not None:
            raise UsageError(f"{argv[0]} is for Slurm's {argv[0].capitalize()}= script, run as root, not through sudo")
        config = helper.load_config()
        job_id = job_id_from_slurmd()
        if argv[0] == "prolog":
            lines = apply_policy(job_id, config)
        else:
            lines = helper.restore_job(job_id, None, config) or [f"nothing to restore for job {job_id}"]
        for line in lines:
            print(line)
        return 0
    except HpcaiError as exc:
        print(f"hpcai-power-helper: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
