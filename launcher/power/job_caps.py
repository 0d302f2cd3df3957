"""Caps that hpcai-power-helper set for a user's Slurm job, and the policy prolog's
settings (launcher/power/prolog.py), as a root run sees them.

The helper is a one-shot process: it holds a GPU's lock only while it changes
the limit, and leaves ``/run/hpcai/gpu-<UUID>.job.json`` naming the job. A
root launcher taking the lock afterwards would read the job's cap as the
GPU's original and put the "original" back over the job's head at its end.
So, with the lock held, a GPU whose record names a job Slurm still runs is
refused; a record whose job has ended is stale and is removed (the first
holder's ``original.json`` stays the limit to restore, never the job's cap),
unless it holds the prolog's SM clock lock or power profile: the record is
what puts that back (`hpcai-power-helper restore --job`), so it is refused too.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from hpcai.errors import PowerError
from hpcai.launcher.power.authority import LOCK_ROOT, read_private_json
from hpcai.launcher.power.job_knobs import KNOB, held_words

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
    the job and its user) for a GPU set for a job Slurm still runs, or left with an
    ended job's SM clock lock or power profile (only its record can put that back);
    an ended job's record of a cap alone is removed (the original is kept apart)."""
    job_live = job_live or slurm_job_live
    for uuid in uuids:
        path = job_record_path(uuid, root)
        record = read_private_json(path)
        if not record or not record.get("job_id"):
            continue
        if job_live(str(record["job_id"])):
            raise GpuCappedForJobError(
                f"GPU {uuid} {_what_is_set(record)} for Slurm job {record['job_id']} of user "
                f"{record.get('user', record.get('uid'))} ({_set_by(record)} "
                f"since {record.get('since')})",
                "wait for that job to end (its epilog puts the GPU back)")
        knob = held_words(record.get(KNOB))
        if knob:  # its record is all that can put the clock or profile back
            raise GpuCappedForJobError(
                f"GPU {uuid} {knob} for Slurm job {record['job_id']}, which has ended "
                "without its epilog putting it back",
                f"as root, run `hpcai-power-helper restore --job {record['job_id']}`, then run again")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # stale: the job ended without its epilog's restore


def _what_is_set(record: dict) -> str:
    """A cap, the prolog's clock lock or profile, or the user's cap over either."""
    knob = held_words(record.get(KNOB))
    if knob is None:
        return "is capped"
    return knob if record.get("set_by") == "prolog" else f"is capped and {knob}"


def _set_by(record: dict) -> str:
    return ("set by the site policy's prolog" if record.get("set_by") == "prolog"
            else "set through hpcai-power-helper")
