"""The plan from the curves: partitions, procurement, and which answers change
when a price or the largest class's share moves by 20% (the sensitivity table)."""
from __future__ import annotations

import dataclasses

from hpcai.launcher.planner.decide import Knobs
from hpcai.launcher.planner.partitions import knob_notes, partition_entry
from hpcai.launcher.planner.procurement import model_entry, policy_settings, rank

SENSITIVITY_STEP = 0.20
# Production's GPU energy per GPU-hour this far from the benchmark's at the policy's
# setting: the benchmark does not represent that class (flagged in the plan).
PRODUCTION_GAP = 0.25


def compute(classes: list, curves: dict, gpus: list, knobs: Knobs, prices) -> dict:
    """partitions (per partition and GPU model) and procurement (best first)."""
    entries = []
    for partition in sorted({c.partition for c in classes}):
        members = [c for c in classes if c.partition == partition]
        for gpu in gpus:
            entry = partition_entry(partition, members, curves, gpu, knobs, prices)
            if entry is not None:
                entries.append(entry)
    models = [model_entry(gpu, classes, curves,
                          policy_settings(entries, classes, curves, gpu, knobs, prices), knobs, prices)
              for gpu in gpus]
    return {"partitions": entries, "procurement": rank(models, knobs.objective),
            "knob_notes": knob_notes(classes, curves),
            "production": production(classes, curves, entries, gpus, knobs, prices)}


def production(classes: list, curves: dict, entries: list, gpus: list, knobs: Knobs, prices) -> list[dict]:
    """Per class measured in production (receipts) and GPU model: production's GPU energy
    per GPU-hour beside the benchmark's at the setting the policy runs the class at
    (the GPUs' own power, W = Wh per GPU-hour), flagged where they differ by more than
    PRODUCTION_GAP."""
    rows = []
    for gpu in gpus:
        settings = policy_settings(entries, classes, curves, gpu, knobs, prices)
        for cls in classes:
            setting = settings.get(cls.name)
            if cls.measured_wh_per_gpu_hour is None or setting is None or not setting.gpu_power_w:
                continue
            if cls.measured_gpu and cls.measured_gpu.upper() != gpu.upper():
                continue  # production ran this class on another model
            ratio = cls.measured_wh_per_gpu_hour / setting.gpu_power_w
            rows.append({"class": cls.name, "gpu": gpu, "setting": {setting.kind: setting.value},
                         "production_wh_per_gpu_hour": cls.measured_wh_per_gpu_hour,
                         "benchmark_wh_per_gpu_hour": setting.gpu_power_w, "ratio": ratio,
                         "flagged": abs(ratio - 1) > PRODUCTION_GAP})
    return rows


def answers(plan: dict) -> dict:
    """What a reader acts on: the model to buy and each partition's default cap."""
    best = plan["procurement"][0]["gpu"] if plan["procurement"] else None
    return {"best_gpu": best,
            "default_caps": {f"{e['partition']}/{e['gpu']}": e["default_cap_w"] for e in plan["partitions"]}}


def variants(classes: list, prices) -> list[tuple[str, list, object]]:
    """(what moved, classes, prices) for each sensitivity row."""
    out = []
    for factor in (1 - SENSITIVITY_STEP, 1 + SENSITIVITY_STEP):
        sign = f"{factor - 1:+.0%}"
        if prices.given:
            out.append((f"energy price {sign}", classes,
                        dataclasses.replace(prices, energy_per_kwh=prices.energy_per_kwh * factor)))
            out.append((f"purchase prices {sign}", classes, dataclasses.replace(prices, gpus={
                k: dataclasses.replace(g, per_gpu=g.per_gpu * factor) for k, g in prices.gpus.items()})))
        moved = _moved_share(classes, factor)
        if moved is not None:
            out.append((f"share of {moved[0]} {sign}", moved[1], prices))
    return out


def _moved_share(classes: list, factor: float):
    """The largest class's share times factor, the rest of its partition rescaled to
    keep the sum 1; None where the class is its partition's only one."""
    largest = max(classes, key=lambda c: c.share)
    rest = [c for c in classes if c.partition == largest.partition and c is not largest]
    if not rest:
        return None
    share = min(largest.share * factor, 1.0)
    others = sum(c.share for c in rest)
    scale = (1 - share) / others
    moved = [dataclasses.replace(c, share=share) if c is largest
             else dataclasses.replace(c, share=c.share * scale) if c in rest else c for c in classes]
    return largest.name, moved


def sensitivity(classes: list, curves: dict, gpus: list, knobs: Knobs, prices, base: dict) -> list[dict]:
    """One row per moved input: the answers under it and which of them changed."""
    rows = []
    start = answers(base)
    for what, moved_classes, moved_prices in variants(classes, prices):
        got = answers(compute(moved_classes, curves, gpus, knobs, moved_prices))
        changed = (["best_gpu"] if got["best_gpu"] != start["best_gpu"] else []) + [
            f"default cap {key}" for key, cap in got["default_caps"].items()
            if start["default_caps"].get(key) != cap]
        rows.append({"input": what, **got, "changed": changed})
    return rows
