"""Each partition's policy per GPU model: the default cap, the class overrides
(a cap, or where the cap does not bind a clock lock: the knob) and what the
default saves against every class at its fastest setting."""
from __future__ import annotations

import math

from hpcai.launcher.planner.curves import change
from hpcai.launcher.planner.decide import (Knobs, allowed, ceil_est, common_caps, gpus_per_node,
                                           members_of, mix_totals, nodes_for, per_unit, pick_default,
                                           slowdown_of)


def partition_entry(partition: str, classes: list, curves: dict, gpu: str, knobs: Knobs,
                    prices) -> dict | None:
    """The policy of one partition on one GPU model; None where no class was measured on it."""
    members, missing = members_of(classes, curves, gpu)
    if not members:
        return None
    entry = {"partition": partition, "gpu": gpu, "default_cap_w": None, "missing_classes": missing,
             "classes": [c.name for c, _, _ in members]}
    caps = common_caps(members, knobs)
    if not caps:
        entry["note"] = ("no cap was measured for every class within its max_slowdown: "
                         "measure the classes at common caps")
        return entry
    per_node = gpus_per_node(gpu, members, prices)
    targets = {n: r for n, r in knobs.targets if n in entry["classes"]}
    fastest = {c.name: curve.fastest for c, curve, _ in members}
    nodes = nodes_for(targets, fastest, per_node)
    sized = None if nodes is None else math.ceil(nodes.mean - 1e-9)  # whole nodes
    cap, totals, work = pick_default(members, caps, knobs, gpu, prices, sized)
    base = mix_totals(members, fastest, prices.gpu(gpu), prices)
    entry.update(default_cap_w=cap, gpus_per_node=per_node, sources=sorted(
        {curve.at(cap).source for _, curve, _ in members}))
    entry["predicted"] = _predicted(totals, base)
    if work is not None:
        entry["budget"] = {"budget_kw": knobs.budget_kw, "mix_hours_per_hour": work.record(),
                           "nodes_sized_for_target": None if nodes is None else ceil_est(nodes)}
    entry["overrides"] = [o for c, curve, _ in members
                          if (o := override(c, curve, cap, knobs, prices.gpu(gpu), prices))]
    return entry


def _predicted(totals: dict, base: dict) -> dict:
    """Per GPU-hour of the mix: the default's figures, and what it saves against
    every class at its fastest setting (fractions, with intervals)."""
    return {"per_mix_gpu_hour": {"energy_kwh": totals["energy"].record(),
                                 "cost": totals["cost"].record(),
                                 "co2_g": totals["co2"].record(),
                                 "gpu_hours": totals["gpu_hours"].record()},
            "energy_saved": change(totals["energy"], base["energy"]).record(),
            "cost_saved": _saved(totals["cost"], base["cost"]),
            "co2_saved": _saved(totals["co2"], base["co2"]),
            "throughput_lost": change(base["gpu_hours"], totals["gpu_hours"]).record()}


def _saved(now, base) -> dict | None:
    return change(now, base).record() if base.mean > 0 else None


def override(cls, curve, default_cap: float, knobs: Knobs, gpu_price, prices) -> dict | None:
    """The class's own best setting where it beats the default by more than the
    intervals (the gain's lower bound above zero): a cap, or, where that cap does
    not bind and clock locks were measured, the best clock lock."""
    limit = slowdown_of(cls, knobs)
    own = [s for s in curve.caps if allowed(s, curve, limit)]
    score = lambda s: per_unit(s, gpu_price, prices)[knobs.objective]  # noqa: E731
    best = min(own, key=lambda s: (score(s).mean, s.value))
    default = curve.at(default_cap)
    clock = knob(curve, best, limit, score)
    chosen = clock or best
    if chosen is default or not score(default).lo > score(chosen).hi:
        return None
    gain = change(score(chosen), score(default))
    out = {"class": cls.name, chosen.kind: chosen.value, "objective": knobs.objective,
           "gain": gain.record(), "per_unit": score(chosen).record(),
           "default_per_unit": score(default).record(),
           "throughput_per_gpu": chosen.throughput.record(), "source": chosen.source}
    if clock is not None:
        out["why"] = (f"the class's best cap ({best.label}) does not bind; the SM clock lock "
                      f"{clock.label} does the same work for less")
    return out


def knob(curve, best_cap, limit: float, score):
    """The best measured clock lock where the best cap did not bind and the lock
    beats it within the class's slowdown limit; else None."""
    if best_cap.binds is not False:
        return None
    clocks = [s for s in curve.clocks if allowed(s, curve, limit)]
    if not clocks:
        return None
    best = min(clocks, key=lambda s: score(s).mean)
    return best if score(best).mean < score(best_cap).mean else None


def knob_notes(classes: list, curves: dict) -> list[dict]:
    """Classes whose caps did not bind on a GPU model but no clock lock was measured."""
    out = []
    for cls in classes:
        for gpu, curve in sorted(curves.get(cls.name, {}).items()):
            if any(s.binds is False for s in curve.caps) and not curve.clocks:
                out.append({"class": cls.name, "gpu": gpu,
                            "note": "some caps did not bind and no SM-clock lock was measured: "
                                    "sweep --sm-clock to find a setting that saves energy"})
    return out
