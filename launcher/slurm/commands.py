"""Slurm's own commands (sbatch, squeue, scontrol, sinfo): the only place
hpcai runs them, each failure turned into a one-line SlurmError."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from hpcai.errors import SlurmError

TIMEOUT_S = 60  # a hung slurmctld must not hang the launcher


def require(name: str = "sbatch") -> str:
    path = shutil.which(name)
    if path is None:
        raise SlurmError(f"`{name}` is not on PATH, and --slurm needs Slurm's commands",
                         "run this on a login node of the cluster (or load its Slurm module), "
                         "or drop --slurm to run here")
    return path


def _call(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    exe = require(args[0])
    try:
        return subprocess.run([exe, *args[1:]], capture_output=True, text=True,
                              timeout=TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(args)}` did not answer in {TIMEOUT_S} s",
                         "check that slurmctld is up (`sinfo`)") from None


def _run(args: list[str], what: str) -> str:
    done = _call(args)
    if done.returncode != 0:
        raise SlurmError(f"{what} failed: {_last_line(done.stderr) or f'exit {done.returncode}'}",
                         f"command: {' '.join(args)}")
    return done.stdout


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def partitions() -> list[str]:
    out = _run(["sinfo", "-h", "-o", "%R"], "listing the partitions (sinfo)")
    return sorted({line.strip() for line in out.splitlines() if line.strip()})


# sbatch's words when no controller answers (src/common/slurm_protocol_api.c's
# "Unable to contact slurm controller", and configless set-ups that find no config).
UNREACHABLE = ("Unable to contact slurm controller", "Could not establish a configuration source",
               "Socket timed out on send/recv", "Connection refused")


def submit(script: Path) -> str:
    """sbatch the script from its folder; the job id ("123")."""
    done = _call(["sbatch", "--parsable", str(script)], cwd=script.parent)
    if done.returncode != 0:
        reason = re.sub(r"^sbatch: (error|fatal): ", "", _last_line(done.stderr))
        # The caller removes the job folder: the hints point at nothing in it.
        if any(marker in done.stderr for marker in UNREACHABLE):
            raise SlurmError(f"the Slurm controller cannot be reached ({reason}); nothing was "
                             "submitted", "check that slurmctld runs and that slurm.conf (or "
                             "SLURM_CONF) names it: `scontrol ping` tells")
        raise SlurmError(f"sbatch rejected the job: {reason or f'exit {done.returncode}'}",
                         "check the partition, account, time limit and options; "
                         "--dry-run prints the job script")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed no job id ({done.stdout.strip()!r})",
                         f"check the queue with squeue; the script is {script}")
    return job_id


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol -o` output: Key=Value pairs separated by spaces."""
    fields = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields


def queued(job_ids: list[str]) -> dict[str, str]:
    """State of each job (or array task, "123_4") still known to squeue."""
    if not job_ids:
        return {}
    done = _call(["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(job_ids)])
    states = {}
    for line in done.stdout.splitlines():  # unknown ids make squeue fail: treated as gone
        job, _, state = line.strip().partition("|")
        if job:
            states[job] = state
    return states


def job_records(job_id: str) -> list[dict[str, str]]:
    """`scontrol show job` (one record per array task); [] once Slurm has forgotten it."""
    done = _call(["scontrol", "-o", "show", "job", job_id])
    if done.returncode != 0:
        return []
    return [parse_fields(line) for line in done.stdout.splitlines() if line.strip()]


def accounting(args: list[str]) -> str:
    """sacct's output: Slurm's accounting (slurmdbd) of jobs that ran, launcher/slurm/mix.py's."""
    return _run(["sacct", *args], "reading Slurm's accounting (sacct)")


def hostnames(nodelist: str) -> list[str]:
    out = _run(["scontrol", "show", "hostnames", nodelist], "expanding the node list")
    return out.split()


def node_address(name: str) -> str:
    """The node's NodeAddr: what its name resolves to for Slurm itself."""
    out = _run(["scontrol", "-o", "show", "node", name], f"looking up node {name}")
    return parse_fields(out).get("NodeAddr") or name


def kill_wait_s() -> int | None:
    """Slurm's KillWait, the seconds from a job's SIGTERM to its SIGKILL; None if unknown."""
    try:
        done = _call(["scontrol", "show", "config"])
    except SlurmError:
        return None
    match = re.search(r"^KillWait\s*=\s*(\d+)", done.stdout, re.MULTILINE)
    return int(match.group(1)) if match and done.returncode == 0 else None
