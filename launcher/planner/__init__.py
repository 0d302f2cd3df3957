"""`hpcai-launch plan`: from measured results, a job mix and prices to what to buy
and which cap each partition runs (issue 42 §1).

inputs (mix, prices) -> the report's loading and cells (report/__init__.py load_results,
report/stats.py aggregate, report/efficiency.py analyse) -> curves (per class and
GPU model) -> partitions and procurement (build.compute) -> sensitivity ->
plan.json, plan.md, plan.html and policy.toml (write.py).
Not the run plan of a sweep: that is launcher/run/plan.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.errors import UsageError

__all__ = ["PlanOptions", "make_plan", "plan_from"]


@dataclass
class PlanOptions:
    mix: str | Path
    output: str | Path = "plan"
    prices: str | Path | None = None
    budget_kw: float | None = None
    targets: list = field(default_factory=list)  # "CLASS=UNITS_PER_S"
    max_slowdown: float = 0.10
    objective: str = "energy"  # energy | cost | co2
    reference: bool = False
    # `report --energy-price` etc. (inputs.facility_override): over the prices file's [energy]
    facility: dict = field(default_factory=dict)


def checked_inputs(opts: PlanOptions):
    """The mix, the prices and the knobs, all checked before anything is read or written."""
    from hpcai.launcher.planner.decide import Knobs
    from hpcai.launcher.planner.inputs import Prices, number, read_mix, read_prices
    from hpcai.workloads.catalog import WORKLOADS

    classes = read_mix(opts.mix, WORKLOADS)
    prices = (read_prices(opts.prices) if opts.prices else Prices()).overridden(opts.facility)
    if opts.objective not in ("energy", "cost", "co2"):
        raise UsageError(f"unknown objective {opts.objective!r}", "choose energy, cost or co2")
    if opts.objective != "energy" and not prices.given:
        raise UsageError(f"--objective {opts.objective} needs --prices",
                         "give a prices file (docs/how-to/choosing-gpus-and-caps.md) or use --objective energy")
    for value, flag in ((opts.budget_kw, "--budget-kw"), (opts.max_slowdown, "--max-slowdown")):
        if value is not None and not math.isfinite(value):
            raise UsageError(f"{flag} {value} is not a finite number", f"give {flag} a finite value")
    number(opts.max_slowdown, "--max-slowdown", high=1.0, high_open=True)
    if opts.budget_kw is not None:
        number(opts.budget_kw, "--budget-kw", low_open=True)
    targets = tuple(_target(text, classes) for text in opts.targets)
    return classes, prices, Knobs(opts.objective, opts.max_slowdown, opts.budget_kw, targets)


def _target(text: str, classes: list) -> tuple[str, float]:
    name, _, rate = text.partition("=")
    if name not in {c.name for c in classes}:
        raise UsageError(f"--target {text!r} names no class of the mix",
                         f"write CLASS=UNITS_PER_S with one of: {', '.join(c.name for c in classes)}")
    try:
        value = float(rate)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--target {text!r}: the rate is not a positive number",
                         "write CLASS=UNITS_PER_S, e.g. llm=50000 (tokens/s the centre must sustain)")
    return name, value


def make_plan(paths: list, opts: PlanOptions) -> dict:
    """Read, decide and write the plan; what was written, for the CLI to say."""
    inputs = checked_inputs(opts)
    parts = _measured(paths, opts)
    return plan_from(parts, inputs, opts, paths, parts.out)


def plan_from(parts, inputs: tuple, opts: PlanOptions, paths: list, out) -> dict:
    """The plan from results already loaded and analysed (parts: the report's
    load_results with cells and analyses) and checked_inputs, written into out (a
    folder that exists); what was written and the headline (what to buy, which cap)."""
    from hpcai.launcher.planner.build import compute, sensitivity
    from hpcai.launcher.planner.write import write_plan

    classes, prices, knobs = inputs
    curves, left_out, gpus = _curves(parts, classes, opts)
    plan = compute(classes, curves, gpus, knobs, prices)
    plan["sensitivity"] = sensitivity(classes, curves, gpus, knobs, prices, plan)
    plan["left_out"] = left_out
    return write_plan(out, plan, classes, prices, knobs, opts, paths)


def _measured(paths: list, opts: PlanOptions):
    """The report's own loading and cells: folders, the store, verified bundles."""
    from hpcai.launcher.report.parts import ReportOptions, load_results
    from hpcai.launcher.report.efficiency import analyse
    from hpcai.launcher.report.stats import aggregate

    parts = load_results(paths, ReportOptions(output=opts.output, reference=opts.reference,
                                       max_slowdown=opts.max_slowdown))
    parts.cells = aggregate(parts.runs, None, 0.05)
    parts.analyses = analyse(parts.cells, opts.max_slowdown)
    return parts


def _curves(parts, classes: list, opts: PlanOptions) -> tuple[dict, list, list]:
    """class name -> GPU -> Curve (the paper's rows where a class was never measured on
    a model, with --reference), what was left out and why, and the GPU models."""
    from hpcai.launcher.planner.curves import class_curves, reference_curve

    curves, left_out = {}, []
    for cls in classes:
        curves[cls.name], left = class_curves(parts.analyses, cls)
        left_out += left
    gpus = {gpu for by_gpu in curves.values() for gpu in by_gpu}
    refs = parts.reference or []
    if opts.reference:
        from hpcai.measure.gpu_names import short_name

        gpus |= {short_name(p.gpu) for p in refs}
        for cls in classes:
            configs = {curve.config for curve in curves[cls.name].values()}
            if any(not config.startswith("preset paper,") for config in configs):
                left_out.append(f"{cls.name}: the paper's rows not used: its results are another "
                                f"configuration ({', '.join(sorted(configs))})")
                continue
            for gpu in gpus - set(curves[cls.name]):
                ref = reference_curve(refs, cls, gpu)
                if ref is not None:
                    curves[cls.name][gpu] = ref
    if not gpus:
        raise UsageError("no class of the mix was measured with power on any GPU model",
                         "give results of the mix's workloads (or --reference for the paper's rows)")
    return curves, left_out, sorted(gpus)
