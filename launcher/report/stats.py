"""Grouping runs into table cells (workload and device x cap) and the
statistics over their repeats and measured epochs.

A cell's throughput is the mean of its repeats' per-GPU throughput (repeats:
the runs of one sweep, or any runs with --combine-runs); its
confidence interval comes from the repeats when there are at least two, else
from the single run's measured epochs. Only usable (schema-valid, complete)
runs enter a cell.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from hpcai.launcher.report.load import Run


@dataclass(frozen=True)
class Group:
    """A table row: one workload on one kind of device at one site."""

    workload: str
    preset: str
    device: str
    device_full: str
    device_type: str
    site: str
    processes: int
    unit: str
    nodes: int = 1  # per-node figures of a multi-node run are their own group
    # "": the only set of runs of this configuration; "run set 2": independent runs
    # at caps another set already has (they are not repeats of it: issue 15).
    series: str = ""
    # Clock caps (--sm-clock/--mem-clock), MHz: each setting is its own row, its
    # caps the columns, so a cap x clock grid reads as rows x columns.
    sm_clock_cap_mhz: int | None = None
    mem_clock_cap_mhz: int | None = None
    # --vary: the grid point's parameters other than the GPUs (already in processes).
    point: str = ""
    # --power-profile: a setting, as a clock cap: its own row, named in the label.
    power_profile: str | None = None

    # The labels: asked for once per table row (hundreds of thousands of times over a
    # fleet's cells), made once per group (the instance's own cache; eq and hash are the
    # fields').
    @functools.cached_property
    def clocks(self) -> str:
        """"SM 1410 MHz, memory 2619 MHz"; "" for the GPU's own clocks."""
        from hpcai.launcher.run.plan import clock_label

        return clock_label(self.sm_clock_cap_mhz, self.mem_clock_cap_mhz)

    def device_label(self, with_site: bool = False) -> str:
        label = f"{self.device} ×{self.processes}"
        if self.nodes > 1:
            label += f" per node, {self.nodes} nodes"
        return f"{label} @ {self.site}" if with_site else label

    def workload_label(self) -> str:
        return self._workload_label

    @functools.cached_property
    def _workload_label(self) -> str:
        label = self.workload if self.preset in ("paper", "?") else f"{self.workload} ({self.preset})"
        if self.clocks:
            label = f"{label}, {self.clocks}"
        if self.power_profile:
            label = f"{label}, power profile {self.power_profile}"
        label = f"{label}, {self.point}" if self.point else label
        return f"{label}, {self.series}" if self.series else label

    @property
    def power_measured(self) -> bool:
        return self.device_type == "cuda"


def group_of(run: Run) -> Group:
    point = ", ".join(f"{k} {v}" for k, v in run.point.items() if k not in ("gpus", "nodes", "model")) \
        if run.point else ""
    if run.input:  # data from storage (--data) is another measurement than preloaded inputs
        point = ", ".join(x for x in (point, "data from storage") if x)
    return _group((run.workload, run.preset, run.device, run.device_full, run.device_type,
                   run.site, run.processes, run.unit, run.nodes, run.sm_clock_cap_mhz,
                   run.mem_clock_cap_mhz, point, run.power_profile))


# A fleet's 100,000 runs fall into a few hundred groups: each made once (a frozen
# dataclass is slow to make), looked up by its fields' values after.
@functools.lru_cache(maxsize=1 << 16)
def _group(fields: tuple) -> Group:
    (workload, preset, device, device_full, device_type, site, processes, unit, nodes, sm, mem,
     point, profile) = fields
    return Group(workload, preset, device, device_full, device_type, site, processes, unit, nodes,
                 sm_clock_cap_mhz=sm, mem_clock_cap_mhz=mem, point=point, power_profile=profile)


@functools.lru_cache(maxsize=1 << 16)
def with_series(group: Group, series: str) -> Group:
    """group as the row of that series ("" for the row without one)."""
    return group if group.series == series else replace(group, series=series)


@dataclass
class Stats:
    n: int
    mean: float | None
    std: float | None
    ci95: tuple[float, float] | None
    cv: float | None

    @property
    def half_width(self) -> float | None:
        return None if self.ci95 is None else (self.ci95[1] - self.ci95[0]) / 2


def describe(values: list[float]) -> Stats:
    """The statistics of one set of values (the known ones), by the cells' query."""
    from hpcai.launcher.report.queries import Values, cell_statistics

    known = [v for v in values if v is not None]
    table = Values()
    table.extend("repeats", [0] * len(known), [0] * len(known), known)
    stats, _ = cell_statistics(table)
    return _stats(stats.get(0, {}), "repeats")


@dataclass
class Cell:
    group: Group
    cap_w: float | None
    runs: list[Run]
    repeats: Stats = None
    epochs: Stats = None
    efficiency: Stats = None  # units per joule, node overhead included
    gpu_efficiency: float | None = None  # units per joule, GPUs only
    node_throughput: float | None = None
    mean_power_w: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    enforced: bool | None = None
    noise: list[str] = field(default_factory=list)

    @property
    def throughput(self) -> float | None:
        return self.repeats.mean

    @property
    def basis(self) -> str:
        return "repeats" if self.repeats.n >= 2 else "epochs"

    @property
    def spread(self) -> Stats:
        return self.repeats if self.repeats.n >= 2 else self.epochs

    @property
    def noisy(self) -> bool:
        return bool(self.noise)

    @property
    def power_available(self) -> bool:
        return self.efficiency.mean is not None

    @property
    def cap_label(self) -> str:
        return cap_label(self.cap_w)

    @property
    def energy_per_unit_j(self) -> float | None:
        eff = self.efficiency.mean
        return 1 / eff if eff else None


def cap_label(cap_w: float | None) -> str:
    return "uncapped" if cap_w is None else f"{cap_w:g} W"


def cap_sort_key(cap_w: float | None):
    return (cap_w is None, cap_w or 0.0)


def origin(run: Run) -> str:
    """What makes runs repeats of each other: one sweep (its repeats), or the nodes
    of one multi-node job; else the run stands alone."""
    if run.sweep_id:
        return f"sweep {run.sweep_id}"
    if run.nodes > 1 and run.slurm_job:
        return f"job {run.slurm_job}"
    return f"run {run.run_id}"


def _series(usable: list[Run], groups: list[Group], combine: bool) -> dict[str, str]:
    """Run id -> series label. Independent runs (other sweeps, plain runs) share a
    row while their caps differ; one at a cap the row already has starts another
    row ("run set 2"), unless combine asks for them to be taken as repeats.
    groups: each usable run's group_of."""
    import heapq

    series: dict[str, str] = {}
    if combine:
        return series
    by_group: dict[Group, dict[str, list[Run]]] = {}
    for i in sorted(range(len(usable)), key=lambda i: usable[i].started or ""):
        by_group.setdefault(groups[i], {}).setdefault(origin(usable[i]), []).append(usable[i])
    for origins in by_group.values():
        # Each origin takes the first row without any of its caps. Rows are kept by the
        # caps they hold (a few kinds, however many rows: a fleet has thousands of sweeps
        # per group), each kind's rows in a heap, so the first free row is found without
        # looking at every row (quadratic in the sweeps).
        rows_holding: dict[frozenset, list[int]] = {}
        count, placed = 0, []
        for members in origins.values():
            caps = frozenset(r.cap_w for r in members)
            free = [(heap[0], taken) for taken, heap in rows_holding.items()
                    if heap and not taken & caps]
            if free:
                index, taken = min(free, key=lambda item: item[0])
                heapq.heappop(rows_holding[taken])
            else:
                index, taken, count = count, frozenset(), count + 1
            heapq.heappush(rows_holding.setdefault(taken | caps, []), index)
            placed.append((index, members))
        if count > 1:
            for index, members in placed:
                for run in members:
                    series[run.run_id] = f"run set {index + 1}"
    return series


def aggregate(runs: list[Run], overhead_w: float | None, noisy_cv: float,
              combine_runs: bool = False) -> list[Cell]:
    """One cell per group and cap, from usable runs only. Repeats are the runs of
    one sweep; independent runs of one configuration are repeats only when
    combine_runs says so."""
    _group.cache_clear()  # groups are made per report (never one from an earlier report)
    with_series.cache_clear()
    usable = [r for r in runs if r.usable]
    groups = [group_of(r) for r in usable]
    series = _series(usable, groups, combine_runs)
    buckets: dict[tuple[Group, float | None], list[Run]] = {}
    for run, group in zip(usable, groups):
        group = with_series(group, series.get(run.run_id, ""))
        buckets.setdefault((group, run.cap_w), []).append(run)
    cells = _cells(list(buckets.items()), overhead_w, noisy_cv)
    return sorted(cells, key=lambda c: (c.group.unit, c.group.workload, c.group.preset,
                                        c.group.device, c.group.site, c.group.processes,
                                        cap_sort_key(c.group.sm_clock_cap_mhz),
                                        cap_sort_key(c.group.mem_clock_cap_mhz),
                                        c.group.point, c.group.series, cap_sort_key(c.cap_w)))


def _cells(buckets: list, overhead_w, noisy_cv) -> list[Cell]:
    """The cells of (group, cap) -> runs, their statistics from one query
    (report/queries.py) over every run's values."""
    from hpcai.launcher.report.queries import cell_statistics

    cells = [Cell(group, cap, sorted(runs, key=lambda r: (r.repeat if r.repeat is not None else 0,
                                                          r.started or "")))
             for (group, cap), runs in buckets]
    stats, run_cvs = cell_statistics(_values(cells, overhead_w))
    number = 0  # runs are numbered in cell order (_values)
    for index, cell in enumerate(cells):
        _fill(cell, stats[index], noisy_cv)
        for run in cell.runs:
            cv = run_cvs.get(number)
            number += 1
            if cv is not None and cv > noisy_cv:
                cell.noise.append(f"run {run.run_id}: epochs vary by {cv:.1%} (CV)")
    return cells


def _values(cells: list[Cell], overhead_w):
    """Every run's values by kind, its cell's number beside each; a cell's efficiency
    only when every repeat measured power (a partial mean would mislead)."""
    from hpcai.launcher.report.queries import Values

    runs = [r for c in cells for r in c.runs]
    cell_of = [i for i, c in enumerate(cells) for _ in c.runs]
    values = Values()

    def add(kind: str, numbers: list, whole_cells: bool = False) -> None:
        left_out = {cell_of[i] for i, v in enumerate(numbers) if v is None} if whole_cells else ()
        keep = [i for i, v in enumerate(numbers) if v is not None and cell_of[i] not in left_out]
        values.extend(kind, [cell_of[i] for i in keep], keep, [numbers[i] for i in keep])

    add("repeats", [r.per_gpu for r in runs])
    add("efficiency", [r.efficiency(overhead_w) for r in runs], whole_cells=True)
    add("gpu_efficiency", [r.gpu_efficiency() for r in runs], whole_cells=True)
    add("node", [r.node for r in runs])
    add("power", [r.mean_power_w for r in runs])
    add("sm_clock", [r.sm_clock_mhz for r in runs])
    add("memory_clock", [r.memory_clock_mhz for r in runs])
    epochs = [(cell_of[i], i, v) for i, r in enumerate(runs) for v in r.per_epoch_per_gpu if v is not None]
    if epochs:
        values.extend("epochs", *map(list, zip(*epochs)))
    return values


# A kind's columns in a cell's figures (queries.BY_CELL): n, mean, std, low, high, cv.
_COLUMNS = {kind: tuple(f"{kind}_{figure}" for figure in ("n", "mean", "std", "low", "high", "cv"))
            for kind in ("repeats", "epochs", "efficiency")}


def _stats(figures: dict, kind: str) -> Stats:
    """A kind's Stats from a cell's figures (queries.cell_statistics)."""
    n, mean, std, low, high, cv = map(figures.get, _COLUMNS[kind])
    if not n:
        return Stats(0, None, None, None, None)
    return Stats(n, mean, std, None if low is None else (low, high), cv)


def _fill(cell: Cell, figures: dict, noisy_cv: float) -> None:
    """The cell's figures from its row of the statistics query."""
    cell.repeats, cell.epochs = _stats(figures, "repeats"), _stats(figures, "epochs")
    cell.efficiency = _stats(figures, "efficiency")
    cell.gpu_efficiency, cell.node_throughput = figures["gpu_efficiency_mean"], figures["node_mean"]
    cell.mean_power_w, cell.sm_clock_mhz = figures["power_mean"], figures["sm_clock_mean"]
    cell.memory_clock_mhz = figures["memory_clock_mean"]
    flags = [r.enforced for r in cell.runs]
    cell.enforced = (False if False in flags else True if flags and all(flags) else None) \
        if cell.cap_w is not None else None
    if cell.repeats.n >= 2 and cell.repeats.cv is not None and cell.repeats.cv > noisy_cv:
        cell.noise.append(f"repeats vary by {cell.repeats.cv:.1%} (CV)")
