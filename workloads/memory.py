"""Peak memory of a run's process, for the result: the device's when it
has one, else the process's peak resident set (with its kind said)."""
from __future__ import annotations

import resource

from hpcai.workloads.batch_search import peak_rss_bytes


def host_peak_memory() -> dict:
    peak = peak_rss_bytes()  # honours a reset after --batch-size auto's probes
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"kind": "host_rss", "bytes": int(peak)}


def torch_peak_memory(ctx) -> dict:
    if ctx.device_type == "cuda":
        import torch

        return {"kind": "device", "bytes": int(torch.cuda.max_memory_allocated(ctx.device))}
    return host_peak_memory()
