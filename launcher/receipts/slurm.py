"""What Slurm says about a job on this node: its owner, account, partition, the
GPUs it holds here (GRES IDX, through the power helper's reading of
`scontrol show job -d`) and, in the epilog, how it ended.

Nothing comes from the job's environment: the job id is the one thing the
prolog and epilog are given (slurmd sets SLURM_JOB_ID for them), and that is
checked before Slurm is asked.
"""
from __future__ import annotations

import re

from hpcai.errors import UsageError
from hpcai.launcher.power import helper

_JOB_ID = re.compile(r"[0-9]{1,12}(_[0-9]{1,9})?")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Slurm's final states (scontrol's JobState) -> the receipt's word for them.
FINAL_STATES = {
    "COMPLETED": "completed", "CANCELLED": "cancelled", "TIMEOUT": "killed", "PREEMPTED": "killed",
    "DEADLINE": "killed", "FAILED": "failed", "OUT_OF_MEMORY": "failed", "NODE_FAIL": "node-failed",
    "BOOT_FAIL": "node-failed", "REQUEUED": "requeued", "REQUEUE_FED": "requeued",
    "REQUEUE_HOLD": "requeued", "PENDING": "requeued",  # back in the queue: its run here ended
}
STATES = ("completed", "cancelled", "killed", "failed", "node-failed", "ended-without-epilog", "requeued", "open")
# States in which a job's prolog may have run and its epilog not yet (a start file is expected).
_UNDER_WAY = {"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "RESIZING", "SIGNALING",
              "STAGE_OUT", "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}


def check_job_id(job_id: str) -> str:
    """The job id as Slurm writes it (digits, an array's _N); anything else, a control
    character included, is refused before it can name a file or reach scontrol."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise UsageError(f"{job_id!r} is not a Slurm job id",
                         "the prolog and epilog pass \"$SLURM_JOB_ID\" (digits, an array's _N)")
    return job_id


def check_node(name: str) -> str:
    if not _NODE.fullmatch(name or ""):
        raise UsageError(f"{name!r} is not a Slurm node name this receipt can be filed under")
    return name


def ended_as(fields: dict) -> str:
    """The receipt's end state from scontrol's JobState and ExitCode. In the epilog
    the job is usually still COMPLETING, so its ExitCode ("status:signal") tells:
    a signal means the job was killed (scancel, time limit, OOM killer)."""
    state = fields.get("JobState", "")
    if state in FINAL_STATES:
        return FINAL_STATES[state]
    status, _, signal = fields.get("ExitCode", "0:0").partition(":")
    # A signal, or the batch shell's status for a command a signal ended (128 + its number:
    # scancel's SIGTERM reads 0:15 or 143:0, depending on which process Slurm saw end).
    if signal not in ("", "0") or (status.isdigit() and 128 < int(status) <= 128 + 64):
        return "killed"
    if status not in ("", "0"):
        return "failed"
    return "completed"


def job_here(config: dict, job_id: str) -> dict:
    """The job's facts as scontrol shows them, and the GPU indices it holds on this
    node (None: all of them, a whole node without GPU GRES)."""
    check_job_id(job_id)
    out = helper.scontrol(config, "show", "job", "-d", "-o", job_id)
    line = out.splitlines()[0] if out.strip() else ""
    fields = helper._fields(line)
    here = helper.this_nodes(config)
    nodes = set(helper.scontrol(config, "show", "hostnames", fields.get("NodeList", "")).split())
    node = sorted(nodes & here)[0] if nodes & here else (sorted(here)[0] if here else "")
    owner = re.fullmatch(r"(.*)\((\d+)\)", fields.get("UserId", ""))
    return {
        "job_id": job_id, "node": check_node(node),
        "user": owner.group(1) if owner else fields.get("UserId"),
        "uid": int(owner.group(2)) if owner else None,
        "account": fields.get("Account"), "partition": fields.get("Partition"),
        "job_name": fields.get("JobName"), "qos": fields.get("QOS"),
        "restarts": int(fields.get("Restarts", "0") or 0),
        "slurm_state": fields.get("JobState"), "exit_code": fields.get("ExitCode"),
        "end_state": ended_as(fields),
        "gpu_indices": helper.job_gpus_here(config, fields, here, line),
    }


def job_now(config: dict, job_id: str) -> dict | None:
    """scontrol's fields for a job, None when Slurm no longer knows it (purged after
    MinJobAge); a controller that does not answer raises (that is not a "no")."""
    from hpcai.errors import PowerError

    check_job_id(job_id)
    try:
        out = helper.scontrol(config, "show", "job", "-o", job_id)
    except PowerError as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    return helper._fields(out.splitlines()[0]) if out.strip() else None


def leftover_state(config: dict, job_id: str, restarts: int, node: str) -> str | None:
    """What became of a run whose start file is still here after its epilog should
    have run: None while that run may still be going on this node (leave it),
    "ended-without-epilog" when Slurm no longer knows the job, else "node-failed"
    (Slurm says NODE_FAIL, or the job ended, was requeued or runs elsewhere)."""
    fields = job_now(config, job_id)
    if fields is None:
        return "ended-without-epilog"
    if fields.get("JobState") in ("NODE_FAIL", "BOOT_FAIL"):
        return "node-failed"
    same_run = int(fields.get("Restarts", "0") or 0) == restarts
    nodes = set(helper.scontrol(config, "show", "hostnames", fields.get("NodeList", "")).split()) \
        if fields.get("NodeList") not in (None, "", "(null)") else set()
    if same_run and fields.get("JobState") in _UNDER_WAY and (node in nodes or fields.get("JobState") == "PENDING"):
        return None
    return "node-failed"
