"""Did the power cap bind? Per GPU and per run (or in-run segment), from the
sampler's readings over the measured window.

A cap binds when the GPU's power management had to hold it back: the
power-cap throttle reason was set (NVML's clocks-event reason SwPowerCap,
amdsmi's PPT violation; both read as "sw_power_cap", hpcai/gpu/) or the power
drawn sat near the limit. A cap above what the work draws never binds: the
decode phase of LLM serving draws 137-300 W of an H200's 700 W
(arXiv 2605.11999), so a cap sweep there changes nothing, and only a clock
lock (`--sm-clock`) moves its energy.
"""
from __future__ import annotations

from hpcai.measure.stats import summarize

POWER_CAP_REASON = "sw_power_cap"
# Power within this share of the limit counts as "at the cap": NVIDIA's power
# management holds the 1-s average a few percent under the limit.
NEAR_CAP_FRAC = 0.95
# The cap bound when the throttle reason or near-cap power covers this share
# of the window's samples.
BINDS_SHARE = 0.10


def gpu_binding(series: list, cap_w: float | None = None) -> dict:
    """One GPU over a window: series = [(t, GpuReading)], cap_w = the limit
    set (None: the limit the readings report)."""
    powers = [r.power_w for _, r in series if r.power_w is not None]
    limits = [r.power_limit_w for _, r in series if r.power_limit_w is not None]
    limit = cap_w if cap_w is not None else (sum(limits) / len(limits) if limits else None)
    known = [r.throttle_reasons for _, r in series if r.throttle_reasons is not None]
    throttle_share = (sum(1 for reasons in known if POWER_CAP_REASON in reasons) / len(known)
                      if known else None)
    near_share = (sum(1 for p in powers if p >= NEAR_CAP_FRAC * limit) / len(powers)
                  if powers and limit else None)
    return {
        "limit_w": limit,
        "power_w": summarize(powers),
        "power_max_w": max(powers) if powers else None,
        "power_min_w": min(powers) if powers else None,
        "power_cap_throttle_share": throttle_share,
        "near_cap_share": near_share,
        "binds": _binds(throttle_share, near_share),
    }


def _binds(throttle_share: float | None, near_share: float | None) -> bool | None:
    shares = [s for s in (throttle_share, near_share) if s is not None]
    if not shares:
        return None  # nothing read: unknown, not "did not bind"
    return any(s >= BINDS_SHARE for s in shares)


def run_binding(per_gpu: list[dict]) -> dict | None:
    """The run's (or segment's) verdict from its used GPUs: bound if any GPU
    bound; the drawn range over all of them."""
    if not per_gpu:
        return None
    flags = [g["binds"] for g in per_gpu]
    binds = True if True in flags else (None if None in flags else False)
    mins = [g["power_min_w"] for g in per_gpu if g["power_min_w"] is not None]
    maxs = [g["power_max_w"] for g in per_gpu if g["power_max_w"] is not None]
    means = [g["power_w"]["mean"] for g in per_gpu if g["power_w"]]
    limits = [g["limit_w"] for g in per_gpu if g["limit_w"] is not None]
    throttle = [g["power_cap_throttle_share"] for g in per_gpu
                if g["power_cap_throttle_share"] is not None]
    near = [g["near_cap_share"] for g in per_gpu if g["near_cap_share"] is not None]
    return {
        "binds": binds,
        "limit_w": min(limits) if limits else None,
        "power_drawn_w": {"min": min(mins) if mins else None,
                          "mean": sum(means) / len(means) if means else None,
                          "max": max(maxs) if maxs else None},
        # The highest draw as a share of the limit: 0.58 = "290 W of a 500 W cap".
        "peak_share_of_limit": (max(maxs) / min(limits) if maxs and limits and min(limits) > 0
                                else None),
        "power_cap_throttle_share": max(throttle) if throttle else None,
        "near_cap_share": max(near) if near else None,
        "near_cap_frac": NEAR_CAP_FRAC,
        "binds_share": BINDS_SHARE,
        "basis": ("the power-cap throttle reason, or power at least "
                  f"{NEAR_CAP_FRAC:.0%} of the limit, in at least {BINDS_SHARE:.0%} of the "
                  "window's samples of any used GPU"),
        "per_gpu": per_gpu,
    }


def section(sampler, discovery, window, used_indices) -> dict | None:
    """power.cap_binding for a result: the used GPUs over the measured window."""
    if sampler is None or discovery is None or window is None or discovery.kind != "gpu":
        return None
    t0, t1 = window
    per_gpu = []
    for i, device in enumerate(discovery.gpus):
        index = device.info().index
        if used_indices is not None and index not in used_indices:
            continue
        per_gpu.append({"index": index, **gpu_binding(sampler.series(i, t0, t1))})
    return run_binding(per_gpu)
