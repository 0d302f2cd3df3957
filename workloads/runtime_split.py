"""The runtime split (MAELSTROM): of each measured epoch, the time the ranks
waited for input and the time they computed, and the bytes read from storage,
as the result's `input` section. Only runs that read data (--data) have one.
"""
from __future__ import annotations


def input_section(ranks: list[dict], description: dict | None,
                  measured_seconds: float | None) -> dict | None:
    """Per epoch: wait and compute are the mean over this node's ranks, bytes their sum."""
    if description is None:
        return None
    measured = [[e for e in r["epochs"] if not e["warmup"] and "data_wait_s" in e]
                for r in ranks]
    n_epochs = min((len(m) for m in measured), default=0)
    per_epoch = []
    for i in range(n_epochs):
        wait = sum(m[i]["data_wait_s"] for m in measured) / len(measured)
        compute = sum(m[i]["compute_s"] for m in measured) / len(measured)
        per_epoch.append({"index": measured[0][i]["index"], "data_wait_s": wait,
                          "compute_s": compute, "data_wait_share": _share(wait, compute),
                          "bytes_read_node": sum(m[i]["data_bytes"] for m in measured)})
    wait = sum(e["data_wait_s"] for e in per_epoch)
    compute = sum(e["compute_s"] for e in per_epoch)
    nbytes = sum(e["bytes_read_node"] for e in per_epoch)
    bandwidth = nbytes / measured_seconds if measured_seconds else None
    return {**description, "data_wait_s": wait, "compute_s": compute,
            "data_wait_share": _share(wait, compute), "bytes_read_node": nbytes,
            "read_bandwidth_node_bytes_per_s": bandwidth, "per_epoch": per_epoch}


def _share(wait: float, compute: float) -> float | None:
    total = wait + compute
    return wait / total if total > 0 else None
