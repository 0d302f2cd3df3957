"""A job's GPUs read at its start and end: energy counter, power, the cap and
clocks in force, and who set them.

Energy over the job is the counter's difference (NVML's
nvmlDeviceGetTotalEnergyConsumption, amdsmi's energy accumulator). Where a GPU
has no counter, or it reads lower at the end than at the start (a driver
reload resets it, AMD's accumulator wraps), the receipt gives instead the
power read at the start and at the end averaged and multiplied by the job's
duration, and says so (energy_method "two-point-power"): an estimate, not a
measurement, since nothing samples during the job.

Who set the cap comes from the node's cap authority (launcher/power/authority.py
and job_caps.py, under /run/hpcai): the job's own user through
hpcai-power-helper ("job"), a running hpcai launcher ("hpcai run ID"), the
site's policy for the partition ("policy"), the GPU's default ("default"),
else "someone else".
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path

from hpcai.errors import HpcaiError
from hpcai.gpu.base import LIMIT_MATCH_W
from hpcai.launcher.power.authority import LOCK_ROOT, holder_of, original_of, read_private_json
from hpcai.launcher.power.job_caps import job_record_path


def _optional(read):
    """A reading a GPU may lack: None instead of an error (the receipt is still written)."""
    try:
        return read()
    except (HpcaiError, OSError, ValueError, TypeError):
        return None


def snapshot(device) -> dict:
    """One GPU's counters and settings now (the receipt's start or end half)."""
    from hpcai.gpu.clocks import clock_control

    reading = _optional(device.read_power)
    limits = _optional(device.power_limits)
    clocks = _optional(lambda: clock_control(device))
    return {
        "t": time.time(),
        "energy_j": getattr(reading, "energy_j", None),
        "power_w": getattr(reading, "power_w", None),
        "cap_w": limits.enforced_w or limits.current_w if limits else None,
        "default_cap_w": limits.default_w if limits else None,
        "sm_clock_mhz": _optional(lambda: clocks.current_mhz("sm")) if clocks else None,
        "memory_clock_mhz": _optional(lambda: clocks.current_mhz("mem")) if clocks else None,
        "sm_clock_limit_mhz": _optional(lambda: clocks.limit_mhz("sm")) if clocks else None,
    }


def read_job_gpus(library, indices: set[int] | None) -> tuple[list[dict], list[dict]]:
    """([{uuid, index, model, snapshot}], [{index, reason}] for GPUs that could not be
    opened) for the GPUs at these library indices (None: every GPU)."""
    from hpcai.measure.gpu_names import short_name

    found = []
    for device in library.devices():
        info = device.info()
        if indices is None or info.index in indices:
            found.append({"uuid": info.uuid, "index": info.index, "model": short_name(info.name),
                          "model_full": info.name, **snapshot(device)})
    unreadable = [u for u in getattr(library, "inaccessible", []) or []
                  if indices is None or u.get("index") in indices]
    return found, unreadable


def cap_set_by(uuid: str, cap_w: float | None, default_w: float | None, job_id: str,
               policy_w: float | None, root: Path = LOCK_ROOT) -> str:
    """Who set the cap in force (the module docstring's order)."""
    if cap_w is None:
        return "unknown"
    record = read_private_json(job_record_path(uuid, root))
    if record and str(record.get("job_id")) == job_id:
        return "job"
    holder = holder_of(uuid, root)
    if holder:
        return f"hpcai run {holder.get('run_id') or holder.get('pid')}"
    if default_w is not None and abs(cap_w - default_w) <= LIMIT_MATCH_W:
        return "default"
    if policy_w is not None and abs(cap_w - policy_w) <= LIMIT_MATCH_W:
        return "policy"
    if original_of(uuid, root):
        return "hpcai"
    return "someone else"


def clocks_set_by(uuid: str, root: Path = LOCK_ROOT) -> str:
    """Who limits the clocks: a running hpcai launcher holding the GPU ("hpcai run
    ID"), else "not hpcai": NVML has no getter for a clock lock, so whether someone
    else locked them it cannot say (the clocks read are in the receipt)."""
    holder = holder_of(uuid, root)
    if holder:
        return f"hpcai run {holder.get('run_id') or holder.get('pid')}"
    return "not hpcai"


def energy_over_job(start: dict, end: dict) -> tuple[float | None, str | None]:
    """(joules, method) for one GPU between its two snapshots (module docstring)."""
    e0, e1 = start.get("energy_j"), end.get("energy_j")
    if e0 is not None and e1 is not None and e1 >= e0:
        return e1 - e0, "counter"
    p0, p1 = start.get("power_w"), end.get("power_w")
    duration = end["t"] - start["t"]
    if p0 is not None and p1 is not None and duration >= 0:
        return (p0 + p1) / 2 * duration, "two-point-power"
    return None, None


def close_quietly(library) -> None:
    with contextlib.suppress(Exception):
        library.close()
