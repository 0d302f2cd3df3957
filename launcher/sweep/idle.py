"""The idle baseline a sweep records before its runs, with the GPUs another
run holds.
"""
from __future__ import annotations


from hpcai.timestamps import now_iso

IDLE_BASELINE_S = 5.0
# A GPU busier than this (mean utilisation, %) while the idle baseline is taken
# runs someone's work: the baseline is recorded invalid and taken again on resume.
IDLE_BUSY_PCT = 5.0


def measure_idle(vendor: str, gpu_indices: list[int] | None, seconds: float,
                 interval_s: float, node_power: dict | None = None) -> dict:
    """Power drawn with nothing running, once per sweep, through the same sampler;
    node_power: the site's [node_power], whose sources are read beside the GPUs."""
    from hpcai.measure.power_sources import discover
    from hpcai.measure.telemetry import Sampler

    if seconds <= 0:
        return {"available": False, "reason": "skipped (--idle-s 0)", "seconds": 0}
    discovery = discover(vendor)
    try:
        if discovery.kind is None:
            return {"available": False, "reason": discovery.reason, "seconds": 0}
        names, sources, uuids = [], [], []
        if discovery.kind == "gpu":
            for device in discovery.gpus:
                info = device.info()
                if gpu_indices is None or info.index in gpu_indices:
                    names.append({"index": info.index, "name": info.name})
                    sources.append(device)
                    uuids.append((info.index, info.uuid))
        else:
            for domain in discovery.rapl:
                names.append({"index": None, "name": domain.name})
                sources.append(domain)
        sampler = Sampler(sources, interval_s)
        node = None
        if (node_power or {}).get("sources"):
            from hpcai.measure.node_power import NodePowerSampler

            node = NodePowerSampler(node_power)
            node._wall0, node._mono0 = sampler._wall0, sampler._mono0  # one clock
            node.start()
        held = _held_by_another_run(uuids)
        try:
            start, end = sampler.sample_for(seconds, "idle")
        finally:
            if node is not None:
                node.stop()
        held = held or _held_by_another_run(uuids)  # again after the wait
        devices = [_idle_device(sampler, i, who, start, end) for i, who in enumerate(names)]
        verdict = _idle_verdict(devices, held)
        baseline = {"available": verdict["available"], "source": discovery.kind,
                    "reason": verdict["reason"], "seconds": end.t - start.t,
                    "measured": now_iso(), "total_power_w": verdict["total_power_w"],
                    "devices": devices}
        if node is not None:
            summary = node.summary((start.t, end.t))
            baseline["node_power"] = {"sources": summary["sources"], "reasons": summary["reasons"]}
        return baseline
    finally:
        discovery.close()




def _idle_device(sampler, i: int, who: dict, start, end) -> dict:
    """One source's idle power: its energy counter's mean where it has one, else
    the samples' mean; its utilisation, to tell an idle GPU from a busy one."""
    from hpcai.measure.telemetry import window_stats

    stats = window_stats(sampler.series(i, start.t, end.t))
    # Utilisation is read once a second (telemetry.FULL_READ_S), so a short
    # baseline may hold no reading inside its marks: judge it on every one taken.
    everything = window_stats(sampler.series(i, float("-inf"), float("inf")))
    e0, e1 = start.energy_j[i], end.energy_j[i]
    counter_w = (e1 - e0) / (end.t - start.t) if e0 is not None and e1 is not None else None
    sampled = (stats["power_w"] or {}).get("mean")
    return {**who, "samples": stats["samples"], "power_w": stats["power_w"],
            "mean_power_w": counter_w if counter_w is not None else sampled,
            "utilization_pct_mean": everything.get("utilization_pct_mean")}


def _held_by_another_run(uuids: list[tuple[int, str | None]]) -> str | None:
    """Which GPU another run holds (the node's authority: launcher/power/authority.py),
    and by whom; None when none is held. A run's GPUs are loaded, whatever their
    utilisation read in a pause (loading data, compiling)."""
    from hpcai.launcher.power.authority import describe_holder, holder_of

    for index, uuid in uuids:
        holder = holder_of(uuid) if uuid else None
        if holder is not None:
            return f"GPU {index} was held by another run ({describe_holder(holder)})"
    return None


def _idle_verdict(devices: list[dict], held: str | None = None) -> dict:
    """The total idle power, and whether it counts (every source read, none busy, none
    held by another run)."""
    known = [d["mean_power_w"] for d in devices if d["mean_power_w"] is not None]
    total = sum(known) if known and len(known) == len(devices) else None
    busy = [f"GPU {d['index']} at {d['utilization_pct_mean']:.0f}%" for d in devices
            if (d.get("utilization_pct_mean") or 0) > IDLE_BUSY_PCT]
    reason = None if total is not None else "too few idle samples"
    if busy:
        reason = (f"the GPUs were not idle ({', '.join(busy)} utilisation, above "
                  f"{IDLE_BUSY_PCT:g}%): measured again when the sweep resumes")
    elif held:
        reason = f"the GPUs were not idle ({held}): measured again when the sweep resumes"
    return {"available": total is not None and not busy and not held, "reason": reason,
            "total_power_w": total}


