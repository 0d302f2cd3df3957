"""What the report is given at report time: prices (`--energy-price`, `--pue`,
`--carbon-intensity`, `--currency`, checked by the planner's rule) and
`--mix MIX [--prices P]`: the planner's plan for the mix, from the report's own
cells, written beside the report (plan/plan.html, plan.md, plan.json,
policy.toml), and its answer (what to buy, which cap to set) on the report's
first screen. The computation is the planner's (launcher/planner plan_from);
this module only checks the options and places the files and lines."""
from __future__ import annotations

from hpcai.errors import UsageError

PLAN_FOLDER = "plan"


def given_at_report_time(opts) -> tuple[dict, tuple | None]:
    """The facility figures that replace the results' recorded ones (the prices file's
    [energy] under the options, with --mix) and the checked plan inputs (None without
    --mix): every option checked before anything is read or written."""
    from hpcai.launcher.planner.inputs import facility_override

    override = facility_override(opts.energy_price, opts.pue, opts.carbon_intensity, opts.currency)
    planned = checked(opts, override)
    return (planned[1][1].facility() if planned else override), planned


def checked(opts, facility: dict):
    """(PlanOptions, checked inputs) for --mix, or None without it; every option
    checked before anything is read or written."""
    from hpcai.launcher.planner import PlanOptions, checked_inputs

    if opts.mix is None:
        if opts.prices is not None:
            raise UsageError("--prices is the plan's prices file and needs --mix",
                             "give --mix MIX too, or --energy-price/--pue/--carbon-intensity for the report")
        return None
    if opts.objective == "edp":
        raise UsageError("--mix plans for --objective energy, cost or co2, not edp",
                         "choose one of those, or leave out --mix")
    plan_opts = PlanOptions(mix=opts.mix, prices=opts.prices, max_slowdown=opts.max_slowdown,
                            objective=opts.objective, reference=opts.reference, facility=facility)
    return plan_opts, checked_inputs(plan_opts)


def write(parts, planned, paths: list) -> dict:
    """The plan under the report's plan/ folder (never through a link); its paths and
    headline (two lines: what to buy, which cap). {} where no mix was given."""
    from hpcai.launcher.planner import plan_from
    from hpcai.safe_files import Folder

    if planned is None:
        return {}
    plan_opts, inputs = planned
    with Folder.open(parts.out) as report_folder:
        report_folder.folder(PLAN_FOLDER).close()
    return plan_from(parts, inputs, plan_opts, paths, parts.out / PLAN_FOLDER)


def first_screen(written: dict) -> list:
    """The plan's two lines for the top of the report, the second linking plan.html."""
    from hpcai.launcher.report.html import Linked

    buy, caps = written["headline"] if len(written["headline"]) == 2 else (*written["headline"], "")
    return [f"For the job mix (--mix): {buy}",
            Linked(f"{caps} The plan, with intervals, overrides and sensitivity:",
                   f"{PLAN_FOLDER}/{written['paths']['html'].name}")]
