"""Facility energy, cost and emissions for a fixed amount of work, and the
recommended cap by objective (energy, cost, co2, edp).

From the site's [facility] section recorded in each result (spec.facility):
facility energy = node energy x pue; cost = facility kWh x price_per_kwh
(+ node hours x node_hour_price, where the site prices node time);
emissions = facility kWh x carbon_g_per_kwh. With a constant price and carbon
intensity, cost and CO2 are proportional to energy and pick the same cap;
only node_hour_price (time has a price) makes cost differ. `report --energy-price`,
`--pue`, `--carbon-intensity` and `--currency` replace what the results recorded
(override_facility), with the planner's rule for them (planner/inputs.py).
"""
from __future__ import annotations

from hpcai.errors import UsageError
from hpcai.launcher.planner.inputs import ENERGY
from hpcai.launcher.report import tiers
from hpcai.launcher.report.efficiency import Analysis, edp_per_unit, fixed_work
from hpcai.launcher.report.tables import Table, TCell, fmt

OBJECTIVES = ("energy", "cost", "co2", "edp")
NEEDS = {"cost": "price_per_kwh", "co2": "carbon_g_per_kwh"}
REPORT_TIME = "--energy-price, --pue, --carbon-intensity, --currency, or --prices's [energy] with --mix"


def override_facility(runs: list, override: dict) -> str:
    """Each run's facility with override's keys replaced (in this report only; the
    results are not changed); the meta line naming the override and what the
    results had recorded. "" where nothing is overridden."""
    if not override:
        return ""
    recorded = {key: sorted({_shown(r.facility[key]) for r in runs if key in r.facility})
                for key in override}
    merged: dict[int, dict] = {}  # runs of one site share their facility dict: so do the merged ones
    for run in runs:
        run.facility = merged.setdefault(id(run.facility), {**run.facility, **override})
    given = ", ".join(f"{key} {_shown(value)}" for key, value in override.items())
    had = "; ".join(f"{key} {' / '.join(values) or 'none'}" for key, values in recorded.items())
    return (f"Facility figures given with this report ({given}: {REPORT_TIME}) replace what the "
            f"results' site config recorded ({had}) in the facility table and --objective.")


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def facility_of(cell) -> dict:
    return next((r.facility for r in cell.runs if r.facility), {})


def per_unit(cell, key: str) -> float | None:
    """Facility kWh, cost or g CO2 per unit of work at this cell's rates."""
    fw = fixed_work(cell, 1.0)
    fac = facility_of(cell)
    if fw is None:
        return None
    kwh = fw.energy_j / 3.6e6 * float(fac.get("pue", 1.0))
    if key == "kwh":
        return kwh
    if key == "cost":
        if "price_per_kwh" not in fac:
            return None
        return kwh * fac["price_per_kwh"] + fw.time_s / 3600 * fac.get("node_hour_price", 0.0)
    if key == "co2":
        return kwh * fac["carbon_g_per_kwh"] if "carbon_g_per_kwh" in fac else None
    raise ValueError(key)


def recommend_by(a: Analysis, objective: str, max_slowdown: float):
    """The cap the objective picks: least energy/cost/CO2 per unit within
    max_slowdown of the fastest cap, or the least energy x time (edp)."""
    if objective == "energy" or not a.candidates:
        return a.recommended
    if objective == "edp":
        return a.min_edp
    allowed = [c for c in a.candidates if c.throughput >= (1 - max_slowdown) * a.fastest.throughput]
    scored = [(per_unit(c, objective), c) for c in allowed]
    if any(score is None for score, _ in scored):
        raise UsageError(f"--objective {objective} needs {NEEDS[objective]}, which the site config "
                         f"of {a.group.workload_label()}'s results did not record",
                         f"pass {ENERGY[NEEDS[objective]][0]} to report (prices are given at report "
                         "time, nothing is measured again), or use --objective energy|edp")
    return min(scored, key=lambda sc: sc[0])[1]


def apply_objective(analyses: list[Analysis], objective: str, max_slowdown: float) -> str:
    """Set each analysis's recommended cap by the objective; the meta line that says so."""
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown objective {objective!r}", f"choose one of {', '.join(OBJECTIVES)}")
    for a in analyses:
        a.recommended = recommend_by(a, objective, max_slowdown)
    if objective == "edp":
        return "Recommended cap (--objective edp): the least energy × time for a fixed amount of work."
    what = {"energy": "energy", "cost": "facility cost", "co2": "facility CO2 emissions"}[objective]
    return (f"Recommended cap (--objective {objective}): least {what} per unit of work within "
            f"{max_slowdown:.0%} of the fastest enforced cap.")


def facility_table(analyses: list[Analysis], work: dict[str, float]) -> Table | None:
    """Per cap: facility energy, cost and emissions for the fixed amount of work;
    None when no result's site gives pue, price or carbon intensity."""
    if not any(facility_of(c) for a in analyses for c in a.candidates):
        return None
    currencies = sorted({facility_of(c).get("currency", "") for a in analyses for c in a.candidates
                         if "price_per_kwh" in facility_of(c)} - {""})
    currency = "/".join(currencies) or "currency"
    header = ["Workload", "GPU", "Cap", "Work", "PUE", "Facility energy (kWh)",
              f"Cost ({currency})", "Emissions (kg CO2e)", "EDP per unit (J·s)"]
    rows = []
    for a in analyses:
        for cell in a.candidates:
            units = work[a.group.unit]
            kwh = per_unit(cell, "kwh")
            if kwh is None:
                continue
            cost, co2 = per_unit(cell, "cost"), per_unit(cell, "co2")
            row = [TCell(a.group.workload_label()), TCell(a.group.device_label()),
                   TCell(cell.cap_label, best=cell is a.recommended),
                   TCell(f"{units:,.0f} {a.group.unit.split('/')[0]}"),
                   TCell(fmt(float(facility_of(cell).get("pue", 1.0)))),
                   TCell(fmt(kwh * units), kwh * units),
                   TCell(fmt(cost * units) if cost is not None else "–",
                         cost * units if cost is not None else None),
                   TCell(fmt(co2 * units / 1000) if co2 is not None else "–",
                         co2 * units / 1000 if co2 is not None else None),
                   TCell(fmt(edp_per_unit(cell)), edp_per_unit(cell))]
            rows.append(row)
    if not rows:
        return None
    return Table("facility", "Facility energy, cost and emissions for a fixed amount of work "
                 "(one node)", header, rows,
                 ["Facility energy: the node's energy (measured at the node where a node source "
                  "measured it, else GPUs plus the fixed overhead) × the site's PUE (1 where not "
                  "given). Cost: × price_per_kwh (+ node hours × node_hour_price where given). "
                  "Emissions: × carbon_g_per_kwh. From each result's site config. "
                  "Bold: the recommended cap.",
                  tiers.note([r for a in analyses for c in a.candidates for r in c.runs])])
