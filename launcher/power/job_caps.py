"""Caps that hpcai-power-helper set for a user's Slurm job, as a root run sees them.

The helper is a one-shot process: it holds a GPU's lock only while it changes
the limit, and leaves ``/run/hpcai/gpu-<UUID>.job.json`` naming the job. A
root launcher taking the lock afterwards would read the job's cap as the
GPU's original and put the "original" back over the job's head at its end.
So, with the lock held, a GPU whose record names a job Slurm still runs is
refused; a record whose job has ended is stale and is removed (the first
holder's ``original.json`` stays the limit to restore, never the job's cap).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from hpcai.errors import PowerError
from hpcai.launcher.power.authority import LOCK_ROOT, read_private_json

# States in which a job still has its node (COMPLETING: its epilog, which
# restores the job's limits, may be running now).
LIVE_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED",
                         "SIGNALING", "STAGE_OUT", "RESIZING"})


class GpuCappedForJobError(PowerError):
    """A running Slurm job's user capped this GPU through the helper."""


def job_record_path(uuid: str, root: Path = LOCK_ROOT) -> Path:
    return Path(root) / f"gpu-{uuid}.job.json"


def slurm_job_live(job_id: str) -> bool:
    """Whether Slurm still runs the job, asked as the helper asks (its settings'
    SLURM_CONF, a clean PATH). A job Slurm no longer knows has ended; Slurm
    not answering is an error, not a "no": the cap may be a live job's."""
    from hpcai.launcher.power import helper

    try:
        out = helper.scontrol(helper.load_config(), "show", "job", "-o", str(job_id))
    except PowerError as exc:
        if "Invalid job id" in exc.message:
            return False
        raise PowerError(f"cannot tell whether Slurm job {job_id}, which capped a GPU of this run "
                         f"through hpcai-power-helper, is still running: {exc.message}",
                         "make scontrol work on this node, or run after that job ends") from None
    lines = out.splitlines()
    fields = dict(tok.split("=", 1) for tok in (lines[0] if lines else "").split() if "=" in tok)
    return fields.get("JobState") in LIVE_STATES


def refuse_running_job_caps(uuids: list[str], root: Path = LOCK_ROOT, job_live=None) -> None:
    """Call with these GPUs' locks held. GpuCappedForJobError (one line naming
    the job and its user) for a GPU capped for a job Slurm still runs; a
    record of an ended job is removed."""
    job_live = job_live or slurm_job_live
    for uuid in uuids:
        path = job_record_path(uuid, root)
        record = read_private_json(path)
        if not record or not record.get("job_id"):
            continue
        if job_live(str(record["job_id"])):
            raise GpuCappedForJobError(
                f"GPU {uuid} is capped for Slurm job {record['job_id']} of user "
                f"{record.get('user', record.get('uid'))} (set through hpcai-power-helper "
                f"since {record.get('since')})",
                "wait for that job to end (its epilog restores the limit)")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # stale: the job ended without its epilog's restore
