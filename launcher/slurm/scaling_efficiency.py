"""A node-scaling job's efficiency: each run against the same job's one-node run
(strong or weak alike: per-GPU throughput over the one-node run's, which is
throughput_N / (N x throughput_1) with the same processes per node)."""
from __future__ import annotations

from hpcai.launcher.run import results
from hpcai.launcher.slurm.job import Job, RunSlot, node_dir


def within_job(job: Job, slot: RunSlot, per_gpu: float) -> dict:
    mode = job.doc["options"].get("scaling") or "weak"
    if slot.nodes == 1:
        return {"efficiency": 1.0, "baseline": None, "mode": mode,
                "reason": "the one-node run of this node-scaling job: the baseline itself"}
    found = _one_node(job, slot)
    if found is None:
        return {"efficiency": None, "baseline": None, "mode": mode,
                "reason": "this job's one-node run with the same cap is not complete (yet): "
                          "the batch script aggregates every run again at its end"}
    base, path = found
    base_per_gpu = base["throughput"]["per_gpu"]
    return {"efficiency": per_gpu / base_per_gpu if base_per_gpu else None, "mode": mode,
            "baseline": {"run_id": base["run_id"], "result": str(path), "per_gpu": base_per_gpu},
            "reason": None}


def _one_node(job: Job, slot: RunSlot):
    """The newest complete one-node run of this job at the same cap and other grid values."""
    others = [p for p in slot.point if p[0] != "nodes"]
    best = None
    for other in job.runs:
        if other.nodes != 1 or other.cap_w != slot.cap_w or \
                [p for p in other.point if p[0] != "nodes"] != others:
            continue
        path = node_dir(job.folder, other.run_id, 0) / "result.json"
        try:
            doc = results.load(path)
        except Exception:  # half-written: simply not a baseline yet
            continue
        if doc and doc.get("status") == "complete":
            started = (doc.get("timestamps") or {}).get("started") or ""
            if best is None or started > best[0]:
                best = (started, doc, path)
    return (best[1], best[2]) if best else None



