"""The report's figures, as PNG and SVG, with matplotlib's Agg backend
(imported here only, when a report is made: `hpcai-launch --help` stays light).

Throughput against cap; efficiency against throughput with the caps labelled
(the seed paper's Figure 1); SM and memory clocks against cap (its Figure 2);
the power time series of one run.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from hpcai.launcher.report.efficiency import Analysis
from hpcai.launcher.report.load import Run
from hpcai.launcher.report.points import RefPoint, workload_key
from hpcai.launcher.report.readable import first_series, series_note
from hpcai.launcher.report.stats import Cell, Group, cap_label, cap_sort_key


@dataclass
class Plot:
    name: str
    title: str
    caption: str
    png: Path
    svg: Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, folder: Path, name: str, title: str, caption: str) -> Plot:
    from hpcai.safe_files import Folder

    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    fig.tight_layout()
    # Into file objects made inside the folder, never through a planted link.
    with Folder.open(folder.parent) as report, report.folder(folder.name) as plots:
        with plots.replacing(png.name) as fh:
            fig.savefig(fh, dpi=110, format="png")
        with plots.replacing(svg.name) as fh:
            fig.savefig(fh, format="svg")
    _pyplot().close(fig)
    return Plot(name, title, caption, png, svg)


SLUG_MAX = 48  # plot file names stay far below any file system's 255 bytes


def _slug(text: str) -> str:
    """A file-name part from any workload name: ASCII letters, digits and dashes,
    at most SLUG_MAX characters; a shortened name ends in a hash of the whole, so
    two long names that share a start still differ."""
    import hashlib

    slug = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in text.lower())
    slug = re.sub("-+", "-", slug).strip("-") or "workload"
    if len(slug) > SLUG_MAX:
        digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:8]
        slug = f"{slug[:SLUG_MAX].rstrip('-')}-{digest}"
    return slug


def cell_plots(folder: Path, cells: list[Cell], analyses: list[Analysis],
               reference: list[RefPoint] | None) -> tuple[list[Plot], list[str]]:
    """Each workload's throughput, efficiency and clocks against the cap."""
    plots, skipped = [], []
    sites = len({c.group.site for c in cells}) > 1
    by_workload: dict[str, list[Cell]] = {}
    for cell in cells:
        by_workload.setdefault(cell.group.workload, []).append(cell)
    for workload, mine in by_workload.items():
        refs = [p for p in reference or [] if workload_key(p.workload) == workload_key(workload)]
        mine, left_out = first_series(mine)  # thousands of rows: the first few stay readable
        drawn, first_plot = {c.group for c in mine}, len(plots)
        plots.append(throughput_plot(folder, workload, mine, refs, sites))
        group_analyses = [a for a in analyses if a.group.workload == workload and a.group in drawn]
        if any(c.power_available for c in mine):
            plots.append(efficiency_plot(folder, workload, mine, group_analyses, sites))
        else:
            skipped.append(f"efficiency of {workload}: power was not measured")
        if any(c.sm_clock_mhz is not None or c.memory_clock_mhz is not None for c in mine):
            plots.append(clocks_plot(folder, workload, mine, sites))
        for plot in plots[first_plot:]:
            plot.caption += series_note(left_out)
        if not any(c.sm_clock_mhz is not None or c.memory_clock_mhz is not None for c in mine):
            skipped.append(f"clocks of {workload}: no GPU clocks were sampled")
    return plots, skipped


def power_plots(folder: Path, run: Run | None) -> tuple[list[Plot], list[str]]:
    """The power time series of run (pick_power_run's), or why there is none."""
    plots, skipped = [], []
    if run is not None:
        plot = power_plot(folder, run)
        if plot is not None:
            plots.append(plot)
        else:
            skipped.append(f"power time series: run {run.run_id} has no power samples")
    else:
        skipped.append("power time series: no run has power samples")
    return plots, skipped


MARKERS = ("o", "s", "^", "D", "v", "P")


def _styles(cells: list[Cell], refs: list[RefPoint] = ()) -> dict:
    """One colour (and marker) per series: two presets, sites or run sets of one
    device never share one. The paper's figures for a GPU take the colour of our
    first series on that GPU, so they can be compared at a glance."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"].colors
    styles, used = {}, 0
    for n, group in enumerate(dict.fromkeys(c.group for c in cells)):
        styles[group] = {"color": palette[n % len(palette)], "marker": MARKERS[n % len(MARKERS)]}
        used = n + 1
    for gpu in dict.fromkeys(p.gpu for p in refs):
        ours = next((st for g, st in styles.items() if isinstance(g, Group) and g.device == gpu), None)
        if ours is None:
            ours = {"color": palette[used % len(palette)]}
            used += 1
        styles[gpu] = {"color": ours["color"], "marker": "x"}
    return styles


def _labels(cells: list[Cell], sites: bool) -> dict:
    """A legend label per series that names whatever tells it from the others."""
    groups = list(dict.fromkeys(c.group for c in cells))
    labels = {}
    for g in groups:
        parts = [g.device_label(sites)]
        if len({x.workload for x in groups}) > 1:
            parts.insert(0, g.workload)
        if len({x.preset for x in groups}) > 1:
            parts.append(f"{g.preset} preset")
        if len({x.clocks for x in groups}) > 1:
            parts.append(g.clocks or "own clocks")
        if len({x.series for x in groups}) > 1:
            parts.append(g.series or "run set 1")
        labels[g] = ", ".join(parts)
    return labels


def _legend(ax) -> None:
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _positions(caps: list) -> dict:
    """Caps on a numeric axis (a 200..700 W sweep shows its spacing); runs with
    no cap go one typical step beyond the highest, labelled "uncapped"."""
    numeric = sorted({c for c in caps if c is not None})
    pos = {c: float(c) for c in numeric}
    if None in caps:
        step = (numeric[-1] - numeric[0]) / (len(numeric) - 1) if len(numeric) > 1 else 100.0
        pos[None] = (numeric[-1] if numeric else 0.0) + step
    return pos


def _cap_ticks(ax, pos: dict, fontsize=None) -> None:
    """Cap labels on the x axis, slanted when close caps (700 W, 750 W) would overlap."""
    ax.set_xticks(list(pos.values()), [cap_label(c) for c in pos], fontsize=fontsize)
    xs = sorted(pos.values())
    span = (xs[-1] - xs[0]) or 1.0
    if len(xs) > 1 and min(b - a for a, b in zip(xs, xs[1:])) < span / 8:
        ax.tick_params(axis="x", labelrotation=35)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")


def throughput_plot(folder: Path, workload: str, cells: list[Cell], refs: list[RefPoint],
                    sites: bool) -> Plot:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    pos = _positions([c.cap_w for c in cells] + [p.cap_w for p in refs])
    styles, labels = _styles(cells, refs), _labels(cells, sites)
    for group in dict.fromkeys(c.group for c in cells):
        mine = sorted((c for c in cells if c.group == group), key=lambda c: cap_sort_key(c.cap_w))
        xs = [pos[c.cap_w] for c in mine]
        ys = [c.throughput for c in mine]
        errs = [c.spread.half_width or 0.0 for c in mine]
        style = styles[group]
        ax.errorbar(xs, ys, yerr=errs, capsize=3, label=labels[group], **style)
        hollow = [(x, y) for x, y, c in zip(xs, ys, mine) if c.enforced is False]
        if hollow:
            ax.scatter(*zip(*hollow), s=90, facecolors="white", edgecolors=style["color"],
                       marker=style["marker"], zorder=3,
                       label=f"{labels[group]}: cap not enforced")
    for gpu in dict.fromkeys(p.gpu for p in refs):
        mine = sorted((p for p in refs if p.gpu == gpu), key=lambda p: p.cap_w)
        ax.plot([pos[p.cap_w] for p in mine], [p.per_gpu for p in mine], linestyle="--",
                alpha=0.6, label=f"{gpu} (paper)", **styles[gpu])
    _cap_ticks(ax, pos)
    ax.set_xlabel("power cap per GPU")
    ax.set_ylabel(f"throughput per GPU ({cells[0].group.unit})")
    ax.set_title(f"{workload}: throughput against power cap")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, folder, f"throughput-{_slug(workload)}", f"{workload}: throughput against cap",
                 "Mean per-GPU throughput with its 95% confidence interval; hollow markers: "
                 "the cap was not enforced" + ("; dashed: the seed paper's figures." if refs else "."))


def efficiency_plot(folder: Path, workload: str, cells: list[Cell], analyses: list[Analysis],
                    sites: bool) -> Plot:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    unit = cells[0].group.unit
    styles, labels = _styles(cells), _labels(cells, sites)
    for a in analyses:
        mine = [c for c in a.cells if c.power_available]
        if not mine:
            continue
        line = ax.plot([c.throughput for c in mine], [c.efficiency.mean for c in mine],
                       label=labels[a.group], **styles[a.group])[0]
        for c in mine:
            text = c.cap_label if c.enforced is not False else f"({c.cap_label})"
            ax.annotate(text, (c.throughput, c.efficiency.mean), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
        if a.pareto:
            ax.plot([c.throughput for c in a.pareto], [c.efficiency.mean for c in a.pareto],
                    linewidth=6, alpha=0.2, color=line.get_color())
        if a.best is not None:
            ax.scatter([a.best.throughput], [a.best.efficiency.mean], marker="*", s=220,
                       color=line.get_color(), edgecolors="black", zorder=4)
    ax.set_xlabel(f"throughput per GPU ({unit})")
    ax.set_ylabel(f"{unit.split('/')[0]} per joule (node overhead included)")
    ax.set_title(f"{workload}: efficiency against throughput")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, folder, f"efficiency-{_slug(workload)}",
                 f"{workload}: efficiency against throughput",
                 "Each point is a cap (labelled); star: the most efficient enforced cap; "
                 "shaded: the Pareto front; caps in parentheses were not enforced.")


def clocks_plot(folder: Path, workload: str, cells: list[Cell], sites: bool) -> Plot:
    plt = _pyplot()
    fig, (sm, mem) = plt.subplots(1, 2, figsize=(10, 4))
    pos = _positions([c.cap_w for c in cells])
    styles, labels = _styles(cells), _labels(cells, sites)
    for group in dict.fromkeys(c.group for c in cells):
        mine = sorted((c for c in cells if c.group == group), key=lambda c: cap_sort_key(c.cap_w))
        for ax, attr in ((sm, "sm_clock_mhz"), (mem, "memory_clock_mhz")):
            points = [(pos[c.cap_w], getattr(c, attr)) for c in mine if getattr(c, attr) is not None]
            if points:
                ax.plot(*zip(*points), label=labels[group], **styles[group])
    for ax, name in ((sm, "SM clock"), (mem, "memory clock")):
        _cap_ticks(ax, pos, fontsize=8)
        ax.set_xlabel("power cap per GPU")
        ax.set_ylabel(f"mean {name} (MHz)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{workload}: clocks against power cap")
    return _save(fig, folder, f"clocks-{_slug(workload)}", f"{workload}: clocks against cap",
                 "Mean SM and memory clocks over the measured epochs, averaged over the GPUs "
                 "used and the repeats.")


def pick_power_run(runs: list[Run], analyses: list[Analysis], wanted: str | None) -> Run | None:
    """The run asked for, else the first run of the most efficient cap, else any with samples."""
    if wanted:  # checked to exist before the report started
        return next(r for r in runs if r.run_id == wanted)
    for a in analyses:
        if a.best is not None:
            for run in a.best.runs:
                if run.samples_path is not None:
                    return run
    return next((r for r in runs if r.usable and r.power_available and r.samples_path), None)


def read_power_samples(path: Path) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, list[tuple[float, float]]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("power_w"):
                series.setdefault(row["source"], []).append((float(row["t"]), float(row["power_w"])))
    return series


def power_plot(folder: Path, run: Run) -> Plot | None:
    from hpcai.launcher.report.samples_store import power_series

    series = power_series(run)  # the zstd Parquet copy once the CSV has been read
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    t0 = min(points[0][0] for points in series.values())
    for source, points in series.items():
        ax.plot([t - t0 for t, _ in points], [p for _, p in points], linewidth=1.5,
                label=source, zorder=3)
    if run.measured_start is not None and run.measured_end is not None:
        ax.axvspan(run.measured_start - t0, run.measured_end - t0, alpha=0.12, color="green",
                   label="measured epochs")
    if run.cap_w is not None:
        ax.axhline(run.cap_w, linestyle=":", color="red", linewidth=1, zorder=2,
                   label=f"cap {run.cap_w:g} W")
    top = max([p for points in series.values() for _, p in points] + [run.cap_w or 0])
    ax.set_xlabel("time since the first sample (s)")
    ax.set_ylabel("power (W)")
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    ax.set_title(f"power of run {run.run_id}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, folder, "power-timeseries", f"Power time series of {run.run_id}",
                 f"{run.workload} on {run.device} at {cap_label(run.cap_w)}: instant power per "
                 "source; shaded: the measured window.")
