"""Scaling studies in the report: what `--vary`, `--data` and node scaling measured.

- Trends (SAIH): throughput per GPU, achieved TFLOP/s per GPU and fraction of
  peak against each varied size (batch size, image or cube size, model).
- Device parallelism (MAELSTROM): for a fixed amount of work, time-to-solution,
  energy-to-solution and Action (energy x time) per GPU count, and the count
  that minimises each.
- Runtime split (MAELSTROM): where the data came from storage, the share of
  the time the ranks waited for it, beside the throughput.
- Node scaling: total throughput and scaling efficiency against one node,
  strong or weak (throughput_N / (N x throughput_1) in both: with the global
  batch fixed this is the speedup over N).
"""
from __future__ import annotations

from hpcai.measure.stats import mean_of_known
from hpcai.launcher.report.load import Run
from hpcai.launcher.report.stats import Cell, cap_label, cap_sort_key
from hpcai.launcher.report.tables import Table, TCell, fmt

SIZE_AXES = ("batch_size", "image_size", "cube", "model")



def _t(text) -> TCell:
    return TCell(str(text))


def _v(value, digits: int = 5) -> TCell:
    return TCell(fmt(value, digits), value)


def _sort_value(value):
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


# ---- trends against a varied size ---------------------------------------------------------
def _trend_rows(runs: list[Run], axis: str) -> dict[tuple, list[Run]]:
    """(workload, others, cap, value) -> runs: one point of one trend line."""
    rows: dict[tuple, list[Run]] = {}
    for run in runs:
        if axis not in run.point:
            continue
        others = ", ".join(f"{k} {v}" for k, v in run.point.items() if k != axis)
        if axis != "gpus":
            others = ", ".join(x for x in (others, f"{run.device} ×{run.processes}") if x)
        rows.setdefault((run.workload, others, run.cap_w, run.point[axis]), []).append(run)
    return rows


def trend_tables(runs: list[Run]) -> list[Table]:
    tables = []
    for axis in SIZE_AXES:
        rows = _trend_rows(runs, axis)
        if len({key[3] for key in rows}) < 2:
            continue
        body = []
        for (workload, others, cap, value), members in sorted(
                rows.items(), key=lambda kv: (kv[0][0], kv[0][1], cap_sort_key(kv[0][2]),
                                              _sort_value(kv[0][3]))):
            tflops = mean_of_known([r.achieved_tflops_node / r.processes for r in members
                            if r.achieved_tflops_node is not None])
            body.append([_t(workload), _t(others or "–"), _t(cap_label(cap)), _t(value),
                         _t(len(members)), _v(mean_of_known([r.per_gpu for r in members])),
                         _v(tflops, 4), _v(mean_of_known([r.fraction_of_peak for r in members]), 3)])
        unit = runs[0].unit if runs else ""
        tables.append(Table(f"trend-{axis}", f"Trend against {axis.replace('_', ' ')}",
                            ["workload", "held fixed", "cap", axis, "runs",
                             f"throughput per GPU ({unit})", "TFLOP/s per GPU",
                             "fraction of peak"], body,
                            ["Means over the runs of each point. TFLOP/s: the node's achieved "
                             "TFLOP/s (counted FLOPs per unit x throughput) over its GPUs; "
                             "fraction of peak: against the device table's dense peak at the "
                             "run's precision (– where the device or precision has none)."]))
    return tables


def trend_points(runs: list[Run]) -> dict[str, dict[tuple, tuple]]:
    """What trend_plots draws, by axis: (workload, others, cap, value) -> the means of
    its runs' throughput per GPU, TFLOP/s per GPU and fraction of peak (made where
    the runs are, so that the figures' process never reads a fleet's runs)."""
    reads = (lambda r: r.per_gpu,
             lambda r: r.achieved_tflops_node / r.processes if r.achieved_tflops_node is not None else None,
             lambda r: r.fraction_of_peak)
    return {axis: {key: tuple(mean_of_known([read(r) for r in members]) for read in reads)
                   for key, members in _trend_rows(runs, axis).items()}
            for axis in SIZE_AXES}


def trend_plots(folder, points: dict[str, dict[tuple, tuple]]) -> list:
    from hpcai.launcher.report.plots import _pyplot, _save, _slug

    plots = []
    for axis in SIZE_AXES:
        rows = points.get(axis, {})
        for workload in sorted({k[0] for k in rows}):
            lines: dict[tuple, list] = {}
            for (w, others, cap, value), means in rows.items():
                if w == workload:
                    lines.setdefault((others, cap), []).append((value, means))
            if all(len(line) < 2 for line in lines.values()):
                continue
            plt = _pyplot()
            fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
            labels = ("throughput per GPU", "TFLOP/s per GPU", "fraction of peak")
            for i, (ax, label) in enumerate(zip(axes, labels)):
                for (others, cap), line in sorted(lines.items(), key=lambda kv: (
                        kv[0][0], cap_sort_key(kv[0][1]))):
                    line = sorted(line, key=lambda p: _sort_value(p[0]))
                    xs = [str(v) for v, _ in line]
                    ys = [means[i] for _, means in line]
                    if any(y is not None for y in ys):
                        ax.plot(xs, [y if y is not None else float("nan") for y in ys],
                                marker="o", label=f"{others}, {cap_label(cap)}")
                ax.set_xlabel(axis.replace("_", " "))
                ax.set_ylabel(label)
            axes[0].legend(fontsize=7)
            title = f"{workload}: throughput, TFLOP/s and fraction of peak against {axis}"
            plots.append(_save(fig, folder, f"trend-{_slug(workload)}-{_slug(axis)}", title,
                               "Each point the mean of its runs; one line per held-fixed "
                               "configuration and cap."))
    return plots


# ---- device parallelism -------------------------------------------------------------------
def parallelism(cells: list[Cell], work: dict[str, float]) -> tuple[list[Table], list[str], list]:
    """Per workload, configuration and cap: the GPU counts (processes) measured."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        g = cell.group
        groups.setdefault((g.workload, g.preset, g.device, g.site, g.point, g.nodes, cell.cap_w),
                          []).append(cell)
    tables, notes, series = [], [], []
    for (workload, preset, device, _site, point, nodes, cap), members in sorted(
            groups.items(), key=lambda kv: (kv[0][:6], cap_sort_key(kv[0][6]))):
        counts = sorted({c.group.processes for c in members})
        if len(counts) < 2:
            continue
        unit = members[0].group.unit
        units = work.get(unit, 1e6)
        rows, figures = [], []
        for cell in sorted(members, key=lambda c: c.group.processes):
            node = cell.node_throughput
            t = units / node if node else None
            e_gpu = units / cell.gpu_efficiency if cell.gpu_efficiency else None
            e_node = units / cell.efficiency.mean if cell.efficiency.mean else None
            energy = e_node if e_node is not None else e_gpu
            action = energy * t if energy is not None and t is not None else None
            figures.append((cell.group.processes, t, energy, action))
            rows.append([_t(cell.group.processes), _v(node), _v(t), _v(e_gpu / 1e3 if e_gpu else None),
                         _v(e_node / 1e3 if e_node else None),
                         _v(action / 1e6 if action is not None else None)])
        label = f"{workload} ({preset}) on {device}" + (f", {point}" if point else "") + \
            (f", {nodes} nodes" if nodes > 1 else "") + f", {cap_label(cap)}"
        best = {}
        for i, what in ((1, "time-to-solution"), (2, "energy-to-solution"), (3, "Action (E × T)")):
            known = [f for f in figures if f[i] is not None]
            best[what] = min(known, key=lambda f: f[i])[0] if known else None
        said = "; ".join(f"{what} is least with {n} GPU(s)" if n is not None
                         else f"{what}: not measured (no power)" for what, n in best.items())
        notes.append(f"{label}: {said}.")
        work_unit = unit.split("/")[0]
        tables.append(Table(f"parallelism-{len(tables) + 1}", f"Device parallelism: {label}",
                            ["GPUs", f"throughput ({unit}, node)", f"time for {units:g} {work_unit} (s)",
                             "energy, GPUs (kJ)", "energy, node (kJ)", "Action E × T (MJ·s)"],
                            rows, [f"For a fixed {units:g} {work_unit} (--work): time = work / the "
                                   "node's throughput; energy = work / units per joule (GPUs "
                                   "alone, and the node with its overhead or measured node "
                                   "energy); Action = node energy (GPU energy where no node "
                                   f"figure) × time. {said[0].upper()}{said[1:]}."]))
        series.append((label, figures))
    return tables, notes, series


def parallelism_plots(folder, series: list) -> list:
    from hpcai.launcher.report.plots import _pyplot, _save, _slug

    plots = []
    for label, figures in series:
        plt = _pyplot()
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        for ax, index, name in ((axes[0], 1, "time-to-solution (s)"),
                                (axes[1], 2, "energy-to-solution (J)"),
                                (axes[2], 3, "Action E × T (J·s)")):
            known = [(f[0], f[index]) for f in figures if f[index] is not None]
            if known:
                ax.plot([k for k, _ in known], [v for _, v in known], marker="o")
                low = min(known, key=lambda kv: kv[1])
                ax.annotate("least", low, xytext=(4, 6), textcoords="offset points", fontsize=8)
            ax.set_xlabel("GPUs")
            ax.set_ylabel(name)
        plots.append(_save(fig, folder, f"parallelism-{_slug(label)}", f"Device parallelism: {label}",
                           "For a fixed amount of work: time, energy and Action against the GPU "
                           "count; the least of each marked."))
    return plots


# ---- runtime split ------------------------------------------------------------------------
def split_table(runs: list[Run]) -> Table | None:
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        if run.input:
            point = ", ".join(f"{k} {v}" for k, v in run.point.items())
            cells.setdefault((run.workload, run.device, run.processes, point, run.cap_w), []).append(run)
    if not cells:
        return None
    rows = []
    for (workload, device, processes, point, cap), members in sorted(
            cells.items(), key=lambda kv: (kv[0][:4], cap_sort_key(kv[0][4]))):
        inp = [r.input for r in members]
        bandwidth = mean_of_known([i.get("read_bandwidth_node_bytes_per_s") for i in inp])
        rows.append([_t(workload), _t(f"{device} ×{processes}"), _t(point or "–"), _t(cap_label(cap)),
                     _t(len(members)), _v(mean_of_known([r.per_gpu for r in members])),
                     _v(mean_of_known([i.get("data_wait_share") for i in inp]), 3),
                     _v(mean_of_known([i.get("data_wait_s") for i in inp]), 4),
                     _v(mean_of_known([i.get("compute_s") for i in inp]), 4),
                     _v(bandwidth / 1e6 if bandwidth is not None else None, 4),
                     _t(f"{inp[0].get('samples')} ({inp[0].get('bytes', 0) / 1e6:.4g} MB"
                        + (", larger than memory)" if inp[0].get("larger_than_memory") else ")")),
                     _t(inp[0].get("workers"))])
    return Table("runtime-split", "Runtime split: data from storage",
                 ["workload", "device", "point", "cap", "runs", f"throughput per GPU ({runs[0].unit})",
                  "data-wait share", "data wait (s)", "compute (s)", "read (MB/s, node)",
                  "dataset (samples, size)", "loader workers"], rows,
                 ["Measured epochs of runs with --data: the time the ranks waited for input "
                  "(the DataLoader, then the copy to the device) and the rest (compute), mean "
                  "over the node's ranks; read: bytes the loaders read over the measured time. "
                  "A high data-wait share means the run is input-bound. Runs without --data "
                  "train on synthetic inputs preloaded on the device (no wait)."])


def split_bars(runs: list[Run]) -> tuple[list[Run], int]:
    """The runs split_plot draws (thousands of bars: the first stay readable), and how
    many more there are."""
    from hpcai.launcher.report.readable import PLOT_BARS

    these = [r for r in runs if r.input]
    return these[:PLOT_BARS], max(0, len(these) - PLOT_BARS)


def split_plot(folder, bars: tuple[list[Run], int]) -> list:
    from hpcai.launcher.report.plots import _pyplot, _save

    from hpcai.launcher.report.readable import PLOT_BARS

    these, left_out = bars
    if not these:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(these) + 1.8))
    labels = [f"{r.workload} ×{r.processes} {', '.join(f'{k} {v}' for k, v in r.point.items())} "
              f"{cap_label(r.cap_w)}" for r in these]
    waits = [r.input.get("data_wait_s") or 0 for r in these]
    computes = [r.input.get("compute_s") or 0 for r in these]
    ax.barh(labels, computes, label="compute")
    ax.barh(labels, waits, left=computes, label="waiting for data")
    for i, r in enumerate(these):
        ax.annotate(f"{fmt(r.per_gpu, 4)} {r.unit}/GPU", (computes[i] + waits[i], i), fontsize=7,
                    xytext=(3, -3), textcoords="offset points")
    ax.set_xlabel("seconds of the measured epochs (mean over ranks)")
    ax.legend(fontsize=7)
    return [_save(fig, folder, "runtime-split", "Runtime split: compute and waiting for data",
                  "Per run with --data; the label gives the throughput per GPU."
                  + (f" The first {PLOT_BARS} runs are drawn; {left_out} more are in "
                     "runtime-split.csv." if left_out else ""))]


# ---- node scaling -------------------------------------------------------------------------
def node_scaling(runs: list[Run]) -> tuple[list[Table], list]:
    """Multi-node results (one per node) summed per run; efficiency against 1 node."""
    totals: dict[str, dict] = {}
    for run in runs:
        if not run.slurm_job:
            continue
        entry = totals.setdefault(run.run_id, {"workload": run.workload, "nodes": run.nodes,
                                               "job": run.slurm_job, "cap": run.cap_w,
                                               "scaling": run.scaling or "weak",
                                               "gpus": 0, "node": 0.0, "seen": 0})
        entry["gpus"] += run.processes
        entry["node"] += run.node or 0.0
        entry["seen"] += 1
    complete = [e for e in totals.values() if e["seen"] == e["nodes"]]
    studies: dict[tuple, list[dict]] = {}
    for e in complete:
        studies.setdefault((e["workload"], e["job"], e["scaling"], e["cap"]), []).append(e)
    tables, series = [], []
    for (workload, job, scaling, cap), entries in sorted(studies.items(), key=lambda kv: (
            kv[0][:3], cap_sort_key(kv[0][3]))):
        by_nodes: dict[int, list[dict]] = {}
        for e in entries:
            by_nodes.setdefault(e["nodes"], []).append(e)
        if len(by_nodes) < 2:
            continue
        base = by_nodes.get(1)
        one = mean_of_known([e["node"] for e in base]) if base else None
        rows, points = [], []
        for n in sorted(by_nodes):
            total = mean_of_known([e["node"] for e in by_nodes[n]])
            eff = total / (n * one) if one and total is not None else None
            rows.append([_t(n), _t(by_nodes[n][0]["gpus"]), _v(total),
                         _v(total / by_nodes[n][0]["gpus"] if total else None), _v(eff, 3)])
            points.append((n, total, eff))
        label = f"{workload}, job {job}, {scaling} scaling, {cap_label(cap)}"
        tables.append(Table(f"scaling-{len(tables) + 1}", f"Node scaling: {label}",
                            ["nodes", "GPUs", "throughput (all nodes)", "per GPU",
                             "scaling efficiency"], rows,
                            ["Efficiency: throughput on N nodes / (N × throughput on 1 node) of "
                             "the same job; strong: the global batch fixed (the speedup over N), "
                             "weak: the batch per GPU fixed."]))
        series.append((label, points))
    return tables, series


def scaling_plots(folder, series: list) -> list:
    from hpcai.launcher.report.plots import _pyplot, _save, _slug

    plots = []
    for label, points in series:
        plt = _pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
        nodes = [n for n, _, _ in points]
        left.plot(nodes, [t for _, t, _ in points], marker="o", label="measured")
        one = next((t for n, t, _ in points if n == 1), None)
        if one:
            left.plot(nodes, [n * one for n in nodes], linestyle="--", color="grey", label="ideal")
        left.set_xlabel("nodes")
        left.set_ylabel("throughput, all nodes")
        left.legend(fontsize=7)
        right.plot(nodes, [e if e is not None else float("nan") for _, _, e in points], marker="o")
        right.axhline(1.0, linestyle="--", color="grey")
        right.set_xlabel("nodes")
        right.set_ylabel("scaling efficiency")
        plots.append(_save(fig, folder, f"scaling-{_slug(label)}", f"Node scaling: {label}",
                           "Throughput against nodes (dashed: N × one node) and the efficiency."))
    return plots


def section(runs: list[Run], cells: list[Cell], work: dict[str, float]):
    """(tables, notes, what draw() needs: small, never the runs) of the report's
    scaling-study sections."""
    usable = [r for r in runs if r.usable]
    trends = trend_tables(usable)
    par_tables, par_notes, par_series = parallelism(cells, work)
    split = split_table(usable)
    scale_tables, scale_series = node_scaling(usable)
    tables = {"trends": trends, "parallelism": par_tables,
              "split": [split] if split else [], "scaling": scale_tables}
    drawing = (trend_points(usable), par_series, split_bars(usable), scale_series)
    return tables, {"parallelism": par_notes}, drawing


def draw(folder, drawing: tuple) -> dict[str, list]:
    """The scaling studies' plots, by section key, from section()'s third part."""
    trends, par_series, bars, scale_series = drawing
    return {"trends": trend_plots(folder, trends),
            "parallelism": parallelism_plots(folder, par_series),
            "split": split_plot(folder, bars),
            "scaling": scaling_plots(folder, scale_series)}
