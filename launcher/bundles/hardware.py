"""Two runs of one workload and protocol on different hardware: not the same
measurement, but the question a comparison of two GPUs asks. The answer is the
ratios B / A of throughput per GPU and of units per joule, each with an
approximate 95% interval, and what differs between the two.

Interval: each mean's 95% half-width relative to it (Student's t over the measured
epochs or blocks), combined to first order (the delta method for a ratio of
independent means): ratio x (1 -+ sqrt(h_a^2 + h_b^2)). A run that gives no spread
for a figure (one window of energy) gives no interval for it, and says so.
"""
from __future__ import annotations

import math

from hpcai.measure.stats import relative_half_width


def _throughput(doc: dict) -> tuple[float | None, float | None]:
    """(throughput per GPU, its relative 95% half-width over the measured epochs)."""
    tp = doc.get("throughput") or {}
    return tp.get("per_gpu"), relative_half_width([float(v) for v in tp.get("per_epoch_node") or []])


def _units_per_joule(doc: dict) -> tuple[float | None, float | None]:
    """(units per joule of the GPUs' measured energy, its relative half-width over the
    adaptive window's blocks; None for a fixed window, measured as one energy)."""
    window = ((doc.get("measurement") or {}).get("window") or {}).get("half_width") or {}
    return (doc.get("power") or {}).get("units_per_joule"), window.get("energy_per_unit_frac")


def ratio(a: tuple, b: tuple) -> dict | None:
    """{a, b, ratio (b / a), interval [low, high] or None}; None where either is missing."""
    (va, ha), (vb, hb) = a, b
    if not va or vb is None:
        return None
    r = vb / va
    if ha is None or hb is None:
        return {"a": va, "b": vb, "ratio": r, "interval": None}
    h = math.hypot(ha, hb)
    return {"a": va, "b": vb, "ratio": r, "interval": [r * (1 - h), r * (1 + h)]}


def ratios(a: dict, b: dict) -> dict:
    """Throughput per GPU and units per joule, B over A, at the runs' (matching) cap."""
    return {"cap_w": ((a.get("power") or {}).get("cap") or {}).get("requested_w"),
            "throughput_per_gpu": ratio(_throughput(a), _throughput(b)),
            "units_per_joule": ratio(_units_per_joule(a), _units_per_joule(b))}


def ratio_lines(found: dict) -> list[str]:
    """The ratios as the terminal shows them."""
    cap = found.get("cap_w")
    lines = [f"B / A at {'no cap' if cap is None else f'{cap:g} W'}:"]
    for key, label in (("throughput_per_gpu", "throughput per GPU"), ("units_per_joule", "units per joule")):
        r = found.get(key)
        if r is None:
            lines.append(f"  {label}: not measured in both runs")
            continue
        span = (f"95% interval {r['interval'][0]:.3f}-{r['interval'][1]:.3f}" if r["interval"]
                else "no interval: a run measured it as one window")
        lines.append(f"  {label}: {r['ratio']:.3f} ({r['b']:.4g} vs {r['a']:.4g}; {span})")
    return lines
