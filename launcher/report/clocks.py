"""The report's clock axis: clock caps (--sm-clock/--mem-clock) beside power caps.

Each clock setting is its own row of the throughput and efficiency tables
(stats.Group carries it), so a cap x clock grid reads as rows x columns there;
this table lists the grid flat, one line per clock setting and cap, with the
clocks the sampler measured, so capped and uncapped clocks of one workload
and device sit side by side.
"""
from __future__ import annotations

from hpcai.launcher.report.stats import Cell, cap_sort_key
from hpcai.launcher.report.tables import Table, TCell, _t, _value_cell, fmt


def _base(cell: Cell) -> tuple:
    g = cell.group
    return (g.unit, g.workload, g.preset, g.device, g.site, g.processes, g.nodes)


def _mhz(value) -> str:
    return "own" if value is None else f"{value} MHz"


def clock_table(cells: list[Cell]) -> Table | None:
    """None when no result capped clocks; else every cell of each workload and
    device that has a clock-capped one (its own-clock cells too, as the baseline)."""
    with_clocks = {_base(c) for c in cells if c.group.clocks}
    if not with_clocks:
        return None
    chosen = sorted((c for c in cells if _base(c) in with_clocks),
                    key=lambda c: (_base(c), cap_sort_key(c.group.sm_clock_cap_mhz),
                                   cap_sort_key(c.group.mem_clock_cap_mhz), c.group.series,
                                   cap_sort_key(c.cap_w)))
    header = ["Workload", "Device", "SM clock cap", "Memory clock cap", "Power cap",
              "Throughput per GPU", "Measured SM clock (MHz)", "Measured memory clock (MHz)",
              "Mean power, node (W)", "Work/J (with overhead)"]
    rows = []
    for c in chosen:
        g = c.group
        label = g.workload if g.preset in ("paper", "?") else f"{g.workload} ({g.preset})"
        rows.append([
            _t(f"{label}, {g.series}" if g.series else label), _t(g.device_label()),
            _t(_mhz(g.sm_clock_cap_mhz)), _t(_mhz(g.mem_clock_cap_mhz)), _t(c.cap_label),
            _value_cell(c.throughput, enforced=c.enforced, noisy=c.noisy),
            TCell(fmt(c.sm_clock_mhz), c.sm_clock_mhz),
            TCell(fmt(c.memory_clock_mhz), c.memory_clock_mhz),
            TCell(fmt(c.mean_power_w), c.mean_power_w),
            TCell(fmt(c.efficiency.mean), c.efficiency.mean)])
    notes = ["Clock caps are per GPU: the highest SM (graphics) and memory clock allowed "
             "(NVIDIA: locked clocks; AMD: the clock limit); \"own\": the GPU's own clocks. "
             "Measured clocks are the sampler's mean over the run, per GPU; throughput per "
             "GPU in the workload's unit."]
    return Table("clock-caps", "Clock caps and power caps", header, rows, notes)
