"""Why one GPU beats another: each workload on its device's roofline, its
efficiency relative to the datasheet peak, and how throughput and work per
joule follow the device figures across devices (Pearson and Spearman).

Device figures come from the device table (hpcai/devices/gpus.toml). A run's
intensity is its FLOPs over its bytes moved per unit of work (both counted by
the workload; the bytes are an upper bound of DRAM traffic, so the intensity
is a lower bound).

FLOPs per unit belong to a configuration, not to a workload: the `tiny` ResNet-50
counts a fraction of the `paper` one's, and input size, sequence length or cube
edge change them too. So our points are grouped by workload, preset and the
FLOPs and bytes counted (a `--vary image_size` grid is several configurations
of one preset), never averaged across them. The seed paper's published
throughput (--reference) takes the FLOPs and bytes of the paper's
configuration: counted by our runs of the `paper` preset (comparable ones
first), never by a run of another preset; without one its rows have no
achieved TFLOP/s, and a note says why.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

from hpcai import devices
from hpcai.devices import paper as paper_devices
from hpcai.launcher.report.load import Run
from hpcai.launcher.report.points import RefPoint, workload_key
from hpcai.launcher.report.tables import Table, TCell, fmt

# The seed paper's devices as its own Table 2 gives them (hpcai/devices/paper.py).
PAPER_DEVICES_NOTE = ("The paper's devices carry the device table's figures for the parts its Table 2 "
                      "names: {}.")

# name, label, how to read it off a device at a precision
FIGURES = (
    ("bandwidth", "memory bandwidth (TB/s)", lambda d, p: d.bandwidth_tbs),
    ("peak", "peak TFLOP/s at the run's precision", lambda d, p: d.tflops.get(p) if p else None),
    ("balance", "balance: peak / bandwidth (FLOP/B)", lambda d, p: d.balance(p) if p else None),
    ("memory", "memory (GB)", lambda d, p: d.memory_gb),
    ("tdp", "TDP (W)", lambda d, p: d.tdp_w),
    ("units", "SMs / CUs", lambda d, p: d.sm_count),
    ("clock", "boost clock (MHz)", lambda d, p: d.boost_mhz),
)
# Devices a coefficient needs to mean anything: with 3 a Pearson r must pass 0.997 to
# differ from 0 at 5%, and its Fisher interval needs n > 3; at 5 the interval is
# defined and |r| > 0.88 is significant (critical values of r, two-sided 5%).
MIN_DEVICES = 5
Z975 = 1.959963984540054


@dataclass
class Point:
    """One workload on one device at one cap: ours (a mean over runs) or the paper's."""

    source: str  # "ours" | "paper"
    workload: str
    config: str  # the preset (and the FLOPs per unit where one preset ran several sizes)
    unit: str
    label: str  # the device as the report names it
    device: devices.Device | None
    cap_w: float | None
    enforced: bool | None
    per_gpu: float
    per_joule: float | None  # units per GPU joule (no node overhead); None where not measured
    precision: str | None  # the device table's column
    flops_per_unit: float | None
    bytes_per_unit: float | None

    @property
    def achieved_tflops(self) -> float | None:
        return self.per_gpu * self.flops_per_unit / 1e12 if self.flops_per_unit else None

    @property
    def intensity(self) -> float | None:
        if not self.flops_per_unit or not self.bytes_per_unit:
            return None
        return self.flops_per_unit / self.bytes_per_unit

    @property
    def peak(self) -> float | None:
        return self.device.tflops.get(self.precision) if self.device and self.precision else None

    @property
    def roof(self) -> float | None:
        """What the roofline allows at this intensity: min(peak, intensity x bandwidth)."""
        if self.peak is None or self.intensity is None or not self.device.bandwidth_tbs:
            return None
        return min(self.peak, self.intensity * self.device.bandwidth_tbs)


def paper_precision(text: str) -> str | None:
    """The table's column for the paper's precision as the reference file states it."""
    low = (text or "").lower()
    for marker, key in (("tf32", "tf32"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32")):
        if marker in low:
            return key
    return None


def configurations(runs: list[Run]) -> dict[int, str]:
    """id(run) -> the configuration its FLOPs per unit belong to: the preset, plus the
    FLOPs per unit where one workload's preset ran at several (input size, sequence
    length, cube edge: a --vary grid or an override)."""
    counts: dict[tuple, set] = {}
    for r in runs:
        counts.setdefault((r.workload, r.preset), set()).add(r.flops_per_unit)
    return {id(r): r.preset if len(counts[(r.workload, r.preset)]) == 1 or not r.flops_per_unit
            else f"{r.preset}, {r.flops_per_unit / 1e9:.5g} GFLOP/{r.work_unit.rstrip('s')}" for r in runs}


@functools.lru_cache(maxsize=None)
def model_flops(key: str) -> tuple[float | None, float | None, str]:
    """(FLOPs, bytes per unit, basis) of the paper preset from the workload's FLOP model,
    counted on PyTorch's meta device (not taken from a run); (None, None, why not) for a
    workload whose engine counts at run time only, or without its framework here."""
    from hpcai.workloads.catalog import WORKLOADS

    workload = next((w for name, w in WORKLOADS.items() if workload_key(name) == key), None)
    if workload is None or "paper" not in workload.presets:
        return None, None, "no `paper` preset of this workload in the catalog"
    impl = workload.impls[workload.default_impl]
    if impl.flop_model is None:
        return None, None, "its engine counts FLOPs at run time only: no run of `--preset paper` to count them"
    try:
        counted = impl.flops(dict(workload.presets["paper"].params))
    except ImportError as exc:
        return None, None, f"its FLOP model needs {exc.name or 'its framework'}, which is not installed here"
    flops = next((v for k, v in counted.items() if k.startswith("train_per_")), None)
    moved = next((v for k, v in counted.items() if k.startswith("train_bytes_per_")), None)
    return flops, moved, "the workload's FLOP model for the `paper` preset (computed, not a run)"


def paper_flops(runs: list[Run], reference_keys=()) -> dict[str, tuple[float | None, float | None, str]]:
    """workload key -> (FLOPs, bytes per unit, where they come from) of the paper's
    configuration: our runs of the `paper` preset, comparable ones first; for a workload
    of reference_keys that none ran, its FLOP model's count. Several counts among our
    runs (an overridden input size) leave the FLOPs unknown."""
    out: dict[str, tuple[float | None, float | None, str]] = {}
    by_workload: dict[str, list[Run]] = {}
    for r in runs:
        if r.preset == "paper" and r.flops_per_unit:
            by_workload.setdefault(workload_key(r.workload), []).append(r)
    for key, rs in by_workload.items():
        comparable = [r for r in rs if r.comparable_to_paper]
        chosen = comparable or rs
        counts = {(r.flops_per_unit, r.bytes_per_unit) for r in chosen}
        if len(counts) > 1:
            out[key] = (None, None, "our `paper` runs counted different FLOPs per unit (an overridden size)")
            continue
        flops, moved = counts.pop()
        out[key] = (flops, moved, "a comparable `paper` run" if comparable else "a `paper` preset run")
    for key in sorted(set(reference_keys) - set(out)):
        out[key] = model_flops(key)
    return out


def collect(runs: list[Run], reference: list[RefPoint] | None) -> list[Point]:
    usable = [r for r in runs if r.usable]
    config = configurations(usable)
    groups: dict[tuple, list] = {}
    for r in usable:
        key = ("ours", r.workload, config[id(r)], r.unit, r.device, r.device_full, r.gpu_memory_bytes,
               r.cap_w, r.precision)
        groups.setdefault(key, []).append(r)
    points = []
    for (source, workload, cfg, unit, label, full, memory, cap, precision), rs in groups.items():
        joules = [x for x in (r.gpu_efficiency() for r in rs) if x is not None]
        # The variant by name and memory size (an "NVIDIA H100" may be the 80 or the 94 GB part).
        points.append(Point(source, workload, cfg, unit, label, devices.lookup(full, memory), cap,
                            all(r.enforced is not False for r in rs),
                            statistics.fmean(r.per_gpu for r in rs),
                            statistics.fmean(joules) if joules else None,
                            devices.peak_precision(precision), rs[0].flops_per_unit, rs[0].bytes_per_unit))
    counted = paper_flops(usable, {workload_key(p.workload) for p in reference or []})
    for p in reference or []:
        flops, moved, _ = counted.get(workload_key(p.workload), (None, None, ""))
        points.append(Point("paper", p.workload, "paper", p.unit, f"{p.gpu} (paper)",
                            paper_devices.device(p.gpu), p.cap_w, p.enforced,
                            p.per_gpu, None, paper_precision(p.precision), flops, moved))
    return points


def paper_flops_notes(runs: list[Run], reference: list[RefPoint]) -> list[str]:
    """Where the paper's rows took their FLOPs per unit from, or why they have none."""
    counted = paper_flops([r for r in runs if r.usable], {workload_key(p.workload) for p in reference})
    notes = []
    for workload in sorted({p.workload for p in reference}):
        flops, _, basis = counted.get(workload_key(workload), (None, None, ""))
        if flops:
            notes.append(f"The paper's {workload} rows: FLOPs and bytes per unit of the paper's configuration, "
                         f"counted by {basis} ({flops / 1e9:.5g} GFLOP per unit).")
        else:
            notes.append(f"The paper's {workload} rows have no achieved TFLOP/s: "
                         + (basis or "no run of the paper's configuration (`--preset paper`) to count its FLOPs "
                            "per unit; another preset's count is not the paper's") + ".")
    return notes


# ---- statistics ------------------------------------------------------------------


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """None where either side does not vary (the coefficient is undefined)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    return pearson(ranks(xs), ranks(ys))


@dataclass
class Correlation:
    source: str
    workload: str
    config: str
    cap_w: float | None
    measure: str  # "throughput per GPU" | "work per joule"
    figure: str
    n: int  # devices behind the coefficients
    pearson: float | None
    spearman: float | None

    def interval(self, which: str) -> tuple[float, float] | None:
        """The 95% interval of a coefficient by Fisher's z: standard error 1 / sqrt(n - 3)
        for Pearson's r, sqrt(1.06 / (n - 3)) for Spearman's rho (Fieller, Hartley and
        Pearson, Biometrika 1957)."""
        r = self.pearson if which == "pearson" else self.spearman
        if r is None or self.n <= 3 or abs(r) >= 1:
            return None
        se = math.sqrt((1.0 if which == "pearson" else 1.06) / (self.n - 3))
        z = math.atanh(r)
        return math.tanh(z - Z975 * se), math.tanh(z + Z975 * se)


def correlations(points: list[Point]) -> list[Correlation]:
    """Per workload and cap, across the devices that ran it: each measure
    against each device figure. Fewer than MIN_DEVICES: n only, no coefficients."""
    by_case: dict[tuple, list[Point]] = {}
    for p in points:
        if p.device is not None:
            by_case.setdefault((p.source, p.workload, p.config, p.cap_w), []).append(p)
    out = []
    for (source, workload, config, cap), ps in by_case.items():
        for measure, value in (("throughput per GPU", lambda p: p.per_gpu), ("work per joule", lambda p: p.per_joule)):
            usable = [p for p in ps if value(p) is not None]
            if not usable:
                continue
            for _name, label, read in FIGURES:
                # One (figure, mean measure) pair per device model.
                per_model: dict[str, tuple] = {}
                for p in usable:
                    x = read(p.device, p.precision)
                    if x is not None:
                        per_model.setdefault(p.device.model, (float(x), []))[1].append(float(value(p)))
                n = len(per_model)
                if n < MIN_DEVICES:
                    out.append(Correlation(source, workload, config, cap, measure, label, n, None, None))
                    continue
                xs = [x for x, _ in per_model.values()]
                ys = [statistics.fmean(y) for _, y in per_model.values()]
                out.append(Correlation(source, workload, config, cap, measure, label, n,
                                       pearson(xs, ys), spearman(xs, ys)))
    return out


# ---- tables ------------------------------------------------------------------------


def _cap(cap: float | None) -> str:
    return f"{cap:g} W" if cap is not None else "uncapped"


def _coefficient(c: Correlation, which: str) -> TCell:
    r = c.pearson if which == "pearson" else c.spearman
    if r is None:
        return TCell("undefined (no spread)")
    span = c.interval(which)
    return TCell(f"{fmt(r, 3)} (95% CI {span[0]:.2f} to {span[1]:.2f})" if span else fmt(r, 3), r)


def correlation_table(corrs: list[Correlation]) -> Table | None:
    """Coefficients only where at least MIN_DEVICES devices ran the case; the rest are
    one note (correlation_note), not rows of numbers that look like findings."""
    rows = []
    for c in sorted(corrs, key=lambda c: (c.source, c.workload, c.config, c.cap_w is None, c.cap_w or 0, c.measure)):
        if c.n < MIN_DEVICES:
            continue
        rows.append([TCell(c.workload), TCell(c.config), TCell(c.source), TCell(_cap(c.cap_w)), TCell(c.measure),
                     TCell(c.figure), TCell(str(c.n), c.n), _coefficient(c, "pearson"), _coefficient(c, "spearman")])
    if not rows:
        return None
    return Table("hardware-correlation", "Hardware correlation across devices",
                 ["Workload", "Configuration", "Source", "Cap", "Measure", "Device figure", "n devices", "Pearson r",
                  "Spearman ρ"],
                 rows, [f"Per workload, configuration (preset; FLOPs per unit where a preset ran several sizes) "
                        f"and cap, across devices; coefficients only where at least {MIN_DEVICES} devices ran it, "
                        "each with its 95% interval (Fisher's z).",
                        "Device figures: datasheet values from hpcai/devices/gpus.toml. Work per joule: GPU energy "
                        "only (no node overhead); the paper published no energy per run."])


def correlation_note(corrs: list[Correlation]) -> str | None:
    """One sentence for the cases too small for a coefficient (instead of their rows)."""
    small: dict[tuple, int] = {}
    for c in corrs:
        if c.n < MIN_DEVICES:
            key = (c.source, c.workload, c.config, c.cap_w, c.measure)
            small[key] = max(small.get(key, 0), c.n)
    if not small:
        return None
    most = max(small.values())
    return (f"Hardware correlation: {len(small)} case(s) (workload, configuration, cap, measure) ran on fewer "
            f"than {MIN_DEVICES} device models (at most {most}): too few for a correlation to mean anything, "
            "so none is shown for them.")


def efficiency_table(points: list[Point]) -> Table | None:
    rows = []
    for p in sorted(points, key=lambda p: (p.source, p.workload, p.config, p.label, p.cap_w is None, p.cap_w or 0)):
        if p.achieved_tflops is None:
            continue
        frac = p.achieved_tflops / p.peak if p.peak else None
        frac_roof = p.achieved_tflops / p.roof if p.roof else None
        cap = _cap(p.cap_w) if p.enforced is not False else f"({_cap(p.cap_w)})"
        rows.append([TCell(p.workload), TCell(p.config), TCell(p.label), TCell(cap), TCell(p.precision or "?"),
                     TCell(fmt(p.achieved_tflops), p.achieved_tflops), TCell(fmt(p.peak), p.peak),
                     TCell(f"{frac:.1%}" if frac is not None else "–", frac),
                     TCell(fmt(p.intensity, 3), p.intensity), TCell(fmt(p.roof), p.roof),
                     TCell(f"{frac_roof:.1%}" if frac_roof is not None else "–", frac_roof)])
    if not rows:
        return None
    return Table("efficiency-vs-peak", "Efficiency relative to peak, per device and cap",
                 ["Workload", "Configuration", "Device", "Cap", "Precision", "Achieved TFLOP/s per GPU", "Peak TFLOP/s",
                  "Of peak", "Intensity (FLOP/B)", "Roofline bound TFLOP/s", "Of bound"],
                 rows, ["Achieved: throughput per GPU x the FLOPs per unit counted for that configuration "
                        "(one row per preset: their FLOPs differ). Peak: dense datasheet figure at "
                        "the run's precision. Intensity: FLOPs / bytes moved per unit; the bytes are an upper "
                        "bound of DRAM traffic (no fusion, no cache reuse), so the intensity is a lower bound and "
                        "the roofline bound min(peak, intensity x bandwidth) a lower bound too.",
                        "Parentheses: a cap the device did not enforce."])


# ---- plots ---------------------------------------------------------------------------


def roofline_plots(folder, points: list[Point]) -> tuple[list, list[str]]:
    """One roofline per device model: its roofs at the precisions run on it,
    each workload at (intensity, achieved TFLOP/s) labelled with its cap."""
    from hpcai.launcher.report.plots import _pyplot, _save, _slug

    by_device: dict[str, list[Point]] = {}
    skipped = []
    for p in points:
        if p.device is None:
            continue
        if p.intensity is None or p.achieved_tflops is None:
            continue
        by_device.setdefault(p.device.model, []).append(p)
    for model in sorted({p.device.model for p in points if p.device} - set(by_device)):
        skipped.append(f"roofline of {model}: no run with counted FLOPs and bytes")
    plots = []
    plt = _pyplot()
    for model, ps in sorted(by_device.items()):
        device = ps[0].device
        fig, ax = plt.subplots(figsize=(7, 4.5))
        lo = min(p.intensity for p in ps) / 10
        hi = max(max(p.intensity for p in ps) * 10, max((device.balance(q) or 1) for q in device.tflops) * 10)
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        styles = iter(("-", "--", "-.", ":") * 2)
        for precision in sorted({p.precision for p in ps if p.precision in device.tflops}):
            peak = device.tflops[precision]
            ax.plot(xs, [min(peak, x * device.bandwidth_tbs) for x in xs], color="black", linestyle=next(styles),
                    label=f"roof, {precision}: {peak:g} TFLOP/s, {device.bandwidth_tbs:g} TB/s")
            balance = device.balance(precision)
            ax.axvline(balance, linestyle=":", color="grey")
            ax.annotate(f"balance {balance:.0f} FLOP/B", (balance, peak), fontsize=7,
                        xytext=(4, -12), textcoords="offset points")
        markers = "osD^v<>p*h"
        for i, (workload, config) in enumerate(sorted({(p.workload, p.config) for p in ps})):
            mine = [p for p in ps if (p.workload, p.config) == (workload, config)]
            for source, face in (("ours", None), ("paper", "none")):  # the paper's points hollow
                these = [p for p in mine if p.source == source]
                if these:
                    drawn = ax.scatter([p.intensity for p in these], [p.achieved_tflops for p in these],
                                       marker=markers[i % len(markers)], zorder=3, color=f"C{i}",
                                       label=f"{workload}, {config}" if source == "ours" else f"{workload}, seed paper")
                    if face:
                        drawn.set_facecolor(face)
                        drawn.set_edgecolor(f"C{i}")
            for p in mine:
                ax.annotate(_cap(p.cap_w) + ("" if p.source == "ours" else " (paper)"),
                            (p.intensity, p.achieved_tflops), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/B; bytes an upper bound)")
        ax.set_ylabel("TFLOP/s per GPU")
        ax.legend(fontsize=7)
        title = f"Roofline: {model}"
        plots.append(_save(fig, folder, f"roofline-{_slug(model)}", title,
                           f"Roofs: {model}'s dense datasheet peak at each precision run and its memory "
                           "bandwidth; dotted: the balance point (peak / bandwidth). Points: workloads at "
                           "(intensity, achieved TFLOP/s), labelled with the cap."))
    return plots, skipped


def section(runs: list[Run], reference: list[RefPoint] | None) -> tuple[list, list[str], list[Point]]:
    """(tables, notes, the points roofline_plots draws) of the report's roofline and
    correlation section."""
    points = collect(runs, reference)
    corrs = correlations(points)
    tables = [t for t in (efficiency_table(points), correlation_table(corrs)) if t is not None]
    notes = [note] if (note := correlation_note(corrs)) else []
    unknown = sorted({p.label for p in points if p.device is None})
    if unknown:
        notes.append("Not in the device table (no roofline or correlation): " + ", ".join(unknown) + ".")
    if reference:
        notes.append(PAPER_DEVICES_NOTE.format(paper_devices.describe()))
        notes += paper_flops_notes(runs, reference)
    return tables, notes, points
