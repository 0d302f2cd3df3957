"""Per workload and device: the most efficient cap, the Pareto front of
throughput against efficiency, a recommended cap under a throughput
constraint, and energy and time for a fixed amount of work.

Efficiency is work per joule with the node overhead included (the seed
paper's measure). Caps that were not enforced are shown but never
recommended: the GPU drew more than the cap, so the cap did not do what its
number says.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.launcher.report.binding import drop_unbound
from hpcai.launcher.report.stats import Cell, Group, cap_sort_key

DEFAULT_WORK = {"images/s": 1e6, "samples/s": 1e6, "tokens/s": 1e9}
# Units no benchmark declares (hpcai-launch exec): one solution (energy and time to
# solution), or a million of the run's own --units.
EXEC_WORK = {"solutions/s": 1.0}
OTHER_WORK = 1e6


def default_work(unit: str) -> float:
    return DEFAULT_WORK.get(unit) or EXEC_WORK.get(unit) or OTHER_WORK


@dataclass
class FixedWork:
    units: float
    energy_j: float
    time_s: float

    @property
    def energy_x_time_js(self) -> float:
        return self.energy_j * self.time_s


def fixed_work(cell: Cell, units: float) -> FixedWork | None:
    """Node energy and time to do `units` of work at this cell's rates."""
    eff, node = cell.efficiency.mean, cell.node_throughput
    if not eff or not node:
        return None
    return FixedWork(units, units / eff, units / node)


def edp_per_unit(cell: Cell) -> float | None:
    """Energy-delay product per unit of work: (J per unit) x (s per unit)."""
    eff, node = cell.efficiency.mean, cell.node_throughput
    if not eff or not node:
        return None
    return (1 / eff) * (1 / node)


@dataclass
class Analysis:
    group: Group
    cells: list[Cell]
    candidates: list[Cell] = field(default_factory=list)  # power measured, cap not disproved
    best: Cell | None = None
    fastest: Cell | None = None
    recommended: Cell | None = None
    min_edp: Cell | None = None
    pareto: list[Cell] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def is_pareto(self, cell: Cell) -> bool:
        return any(c is cell for c in self.pareto)


def analyse(cells: list[Cell], max_slowdown: float) -> list[Analysis]:
    groups: dict[Group, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group, []).append(cell)
    out = []
    for group, members in groups.items():
        members = sorted(members, key=lambda c: cap_sort_key(c.cap_w))
        a = Analysis(group, members)
        a.candidates = [c for c in members if c.power_available and c.enforced is not False]
        drop_unbound(a)  # a cap the GPU never reached saved nothing (report/binding.py)
        unenforced = [c.cap_label for c in members if c.enforced is False]
        if unenforced:
            a.notes.append(f"not enforced, so not recommended: {', '.join(unenforced)}")
        if not any(c.power_available for c in members):
            reasons = {r.power_reason for c in members for r in c.runs if r.power_reason}
            why = f": {min(reasons)}" if reasons else ""
            a.notes.append(f"power was not measured{why}")
        out.append(a)
    _pick(out, max_slowdown)
    return out


def _pick(analyses: list[Analysis], max_slowdown: float) -> None:
    """Each group's best, fastest, recommended and least-EDP cap and its Pareto
    front, from one query over every group's candidates (report/queries.py)."""
    from hpcai.launcher.report.queries import picks

    columns = {"grp": [], "pos": [], "tp": [], "eff": [], "node": []}
    for grp, a in enumerate(analyses):
        for pos, cell in enumerate(a.candidates):
            for key, value in zip(columns, (grp, pos, cell.throughput, cell.efficiency.mean,
                                            cell.node_throughput)):
                columns[key].append(value)
    if not columns["grp"]:
        return
    for grp, pos, best, fastest, recommended, min_edp, pareto in picks(columns, max_slowdown):
        a = analyses[grp]
        cell = a.candidates[pos]
        for role, chosen in (("best", best), ("fastest", fastest), ("recommended", recommended),
                             ("min_edp", min_edp)):
            if chosen:
                setattr(a, role, cell)
        if pareto:
            a.pareto.append(cell)
