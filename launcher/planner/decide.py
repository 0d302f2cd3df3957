"""The plan's answers from the classes' curves: each partition's default cap per GPU
model, class overrides (a cap, or a clock lock where the cap does not bind), and
the GPU models ranked for the mix.

Every figure carries its 95% interval by interval arithmetic over the cells'
intervals (curves.Est: each bound computed from the bounds that make it
smallest or largest), so an interval here is never narrower than the data allow.

The mix's fixed work: class c of a partition does share_c of the partition's
GPU-hours at its fastest setting, W_c = share_c x 3600 s x its fastest per-GPU
throughput (units per GPU-hour of the mix); a setting is judged by what doing
exactly that work costs (energy, cost or CO2) and how many GPU-hours it takes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hpcai.launcher.planner.curves import Est, total

SECONDS_PER_YEAR = 365.25 * 86400


@dataclass(frozen=True)
class Knobs:
    objective: str = "energy"  # energy | cost | co2
    max_slowdown: float = 0.10  # for classes that give none
    budget_kw: float | None = None  # facility power budget of a partition
    targets: tuple = ()  # (class name, units/s)


def per_unit(setting, gpu_price, prices) -> dict:
    """Facility kWh, cost and g CO2 per unit of work at a setting, with intervals.
    Cost: the GPU's purchase spread over its lifetime at full use, plus energy."""
    kwh = setting.efficiency.recip() * (prices.pue / 3.6e6)
    capital = (gpu_price.per_gpu if gpu_price else 0.0) / (prices.lifetime_years * SECONDS_PER_YEAR)
    gpu_s = setting.throughput.recip()
    return {"energy": kwh, "cost": gpu_s * capital + kwh * prices.energy_per_kwh,
            "co2": kwh * prices.carbon_g_per_kwh, "gpu_s": gpu_s}


def slowdown_of(cls, knobs: Knobs) -> float:
    return knobs.max_slowdown if cls.max_slowdown is None else cls.max_slowdown


def allowed(setting, curve, limit: float) -> bool:
    return setting.throughput.mean >= (1 - limit) * curve.fastest.throughput.mean - 1e-12


def mix_totals(members: list, chosen: dict, gpu_price, prices) -> dict:
    """members: (class, curve, W_c); chosen: class name -> Setting. Energy (kWh),
    cost, CO2 (g) and GPU-hours for the mix's fixed work."""
    out = {key: [] for key in ("energy", "cost", "co2", "gpu_s")}
    for cls, _curve, work in members:
        figures = per_unit(chosen[cls.name], gpu_price, prices)
        for key in out:
            out[key].append(figures[key] * work)
    sums = {key: total(values) for key, values in out.items()}
    sums["gpu_hours"] = sums.pop("gpu_s") * (1 / 3600)
    return sums


def members_of(classes: list, curves: dict, gpu: str) -> tuple[list, list[str]]:
    """The partition's classes measured on gpu with their fixed work, and those missing."""
    members, missing = [], []
    for cls in classes:
        curve = curves.get(cls.name, {}).get(gpu)
        if curve is None:
            missing.append(cls.name)
        else:
            members.append((cls, curve, cls.share * 3600 * curve.fastest.throughput.mean))
    return members, missing


def common_caps(members: list, knobs: Knobs) -> list[float]:
    """Caps every class measured and none loses more than its max_slowdown at."""
    caps = sorted({s.value for _, curve, _ in members for s in curve.caps})
    return [cap for cap in caps
            if all(curve.at(cap) is not None and allowed(curve.at(cap), curve, slowdown_of(cls, knobs))
                   for cls, curve, _ in members)]


def budget_work(totals: dict, gpus_per_node: int, nodes: float | None, budget_kw: float) -> Est:
    """Mix-hours done per hour within a facility budget: as many nodes as the budget
    powers (at most `nodes`, where the target sized the partition)."""
    per_gpu_kw = totals["energy"] * totals["gpu_hours"].recip()  # facility kW per busy GPU
    powered = (per_gpu_kw * gpus_per_node).recip() * budget_kw  # nodes the budget runs
    if nodes is not None:
        powered = Est(min(powered.mean, nodes), min(powered.lo, nodes), min(powered.hi, nodes))
    return powered * gpus_per_node * totals["gpu_hours"].recip()


def gpus_per_node(gpu: str, members: list, prices) -> int:
    price = prices.gpu(gpu)
    if price and price.gpus_per_node:
        return price.gpus_per_node
    return members[0][1].fastest.processes if members else 1


def nodes_for(targets: dict, chosen: dict, per_node: int) -> Est | None:
    """Nodes whose GPUs do every --target rate (units/s) at the chosen settings."""
    if not targets or any(name not in chosen for name in targets):
        return None
    return total(chosen[name].throughput.recip() * (rate / per_node) for name, rate in targets.items())


def pick_default(members: list, caps: list, knobs: Knobs, gpu: str, prices, nodes) -> tuple:
    """The default cap: least objective for the mix, or most work within --budget-kw."""
    price = prices.gpu(gpu)
    scored = []
    for cap in caps:
        totals = mix_totals(members, {c.name: curve.at(cap) for c, curve, _ in members}, price, prices)
        if knobs.budget_kw is not None:
            work = budget_work(totals, gpus_per_node(gpu, members, prices), nodes, knobs.budget_kw)
            scored.append((-work.mean, cap, totals, work))
        else:
            scored.append((totals[knobs.objective].mean, cap, totals, None))
    _, cap, totals, work = min(scored, key=lambda item: (item[0], item[1]))
    return cap, totals, work


def ceil_est(est: Est | None) -> dict | None:
    if est is None:
        return None
    return {"value": math.ceil(est.mean - 1e-9), "ci95": [math.ceil(est.lo - 1e-9), math.ceil(est.hi - 1e-9)],
            "exact": est.record()}
