"""The GPU models ranked for the mix: per class its throughput per GPU and per
node, work per kWh, cost per unit over the lifetime and power, at the setting
the partition policy gives it on that model; nodes and power for --target.

To rank models against each other the mix's work must not depend on the model:
class c's work per mix-hour is W_c = w_c x 3600 s x the fastest per-GPU
throughput any model reached for it, with w_c its share (partitions weigh
alike); a model missing a class is ranked on the classes it has (weights
renormalised) and the plan names what it lacks.
"""
from __future__ import annotations

from hpcai.launcher.planner.curves import total
from hpcai.launcher.planner.decide import Knobs, allowed, ceil_est, gpus_per_node, nodes_for, per_unit, slowdown_of


def policy_settings(entries: list, classes: list, curves: dict, gpu: str, knobs: Knobs, prices) -> dict:
    """Class name -> the Setting the plan's policy runs it at on gpu."""
    out = {}
    for cls in classes:
        curve = curves.get(cls.name, {}).get(gpu)
        if curve is None:
            continue
        entry = next((e for e in entries if e["partition"] == cls.partition and e["gpu"] == gpu), None)
        over = next((o for o in (entry or {}).get("overrides", []) if o["class"] == cls.name), None)
        if over is not None:
            kind = "cap_w" if "cap_w" in over else "sm_clock_mhz"
            pool = curve.caps if kind == "cap_w" else curve.clocks
            out[cls.name] = next(s for s in pool if s.kind == kind and s.value == over[kind])
        elif entry and entry.get("default_cap_w") is not None:
            out[cls.name] = curve.at(entry["default_cap_w"])
        else:  # the partition has no common cap: the class's own best
            own = [s for s in curve.caps if allowed(s, curve, slowdown_of(cls, knobs))]
            out[cls.name] = min(own, key=lambda s: per_unit(s, prices.gpu(gpu), prices)[knobs.objective].mean)
    return out


def class_figures(setting, per_node: int, gpu_price, prices) -> dict:
    figures = per_unit(setting, gpu_price, prices)
    return {"setting": {setting.kind: setting.value}, "source": setting.source,
            "throughput_per_gpu": setting.throughput.record(),
            "throughput_per_node": (setting.throughput * per_node).record(),
            "work_per_kwh": figures["energy"].recip().record(),
            "cost_per_unit": figures["cost"].record() if prices.given else None,
            "co2_g_per_unit": figures["co2"].record() if prices.given else None,
            "power_per_node_kw": (setting.power_w * (per_node * prices.pue / 1000)).record()}


def model_entry(gpu: str, classes: list, curves: dict, chosen: dict, knobs: Knobs, prices) -> dict:
    """One GPU model's figures for the mix; `score`: the objective per mix-hour."""
    present = [c for c in classes if c.name in chosen]
    members = [(c, curves[c.name][gpu], None) for c in present]
    per_node = gpus_per_node(gpu, members, prices)
    price = prices.gpu(gpu)
    entry = {"gpu": gpu, "gpus_per_node": per_node,
             "price_per_gpu": price.per_gpu if price else None,
             "missing_classes": [c.name for c in classes if c.name not in chosen],
             "classes": {c.name: class_figures(chosen[c.name], per_node, price, prices) for c in present}}
    weight = sum(c.share for c in present)
    score = {}
    for key in ("energy", "cost", "co2"):
        parts = [per_unit(chosen[c.name], price, prices)[key] * (c.share / weight * 3600 * _top(curves, c))
                 for c in present]
        score[key] = total(parts).record() if parts else None
    entry["per_mix_hour"] = score
    targets = dict(knobs.targets)
    nodes = nodes_for(targets, chosen, per_node)
    entry["nodes_needed"] = ceil_est(nodes)
    entry["power_kw"] = None if nodes is None else total(
        per_unit(chosen[n], price, prices)["energy"] * (rate * 3600) for n, rate in targets.items()).record()
    if targets and nodes is None:
        entry["note"] = "no nodes or power for --target: a targeted class was not measured on this model"
    return entry


def _top(curves: dict, cls) -> float:
    return max(curve.fastest.throughput.mean for curve in curves[cls.name].values())


def rank(entries: list, objective: str) -> list:
    """Best first: least objective per mix-hour; models with nothing measured last."""
    def key(entry):
        score = entry["per_mix_hour"][objective]
        return (score is None, score["value"] if score else 0.0, entry["gpu"])
    ranked = sorted(entries, key=key)
    for place, entry in enumerate(ranked, 1):
        entry["rank"] = place
    return ranked
