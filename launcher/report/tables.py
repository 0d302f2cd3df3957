"""The report's tables, as plain data that the Markdown, CSV and HTML writers
render. The throughput tables follow the seed paper's Tables 3 and 4:
workload and GPU as rows, caps as columns, throughput per GPU, and values
whose cap was not enforced in parentheses.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.launcher.report import cell_origins
from hpcai.launcher.report import reference as ref
from hpcai.launcher.report import tiers
from hpcai.launcher.report.efficiency import Analysis, edp_per_unit, fixed_work
from hpcai.launcher.report.long_tables import LongRows, split_columns, text_column
from hpcai.launcher.report.load import Run, shown_path
from hpcai.launcher.report.points import RefPoint, workload_key
from hpcai.launcher.report.stats import Cell, cap_label, cap_sort_key, group_of, origin, with_series

NOISY_MARK = "†"
UNIT_TITLES = {"images/s": "Vision workloads (images/s per GPU)",
               "samples/s": "Scientific workloads (samples/s per GPU)",
               "tokens/s": "Language workloads (tokens/s per GPU)"}


@dataclass(slots=True)  # a fleet's report holds millions: no per-cell dict, no per-cell list
class TCell:
    text: str
    value: float | None = None
    best: bool = False  # the most efficient cap of its row
    unenforced: bool = False
    noisy: bool = False
    reference: bool = False
    ratio: float | None = None  # ours / the paper's, where comparable (report/reference.py)
    failed: list[str] | tuple = ()  # validity checks of runs left out here


@dataclass
class Table:
    key: str  # file name stem of its CSV
    title: str
    header: list[str]
    rows: list[list[TCell]]
    notes: list[str] = field(default_factory=list)
    flag_columns: bool = False  # caps as columns: the CSV gives each its noisy/enforced flags
    plain_columns: tuple = ()  # columns among those that are no cap (no flags): "Origin"
    # A row per run: the rows beyond the first page's, made when written (report/long_tables.py).
    more: LongRows | None = None


PRECISION_NOTE = ("Our figures: 5 significant figures (the CSV files and report.json keep "
                  "full precision); the paper's: exactly as published.")
BOLD_NOTE = ("Bold: the most efficient enforced cap of the row (most work per joule, node "
             "overhead included).")


def fmt(value: float | None, digits: int = 5) -> str:
    """Five significant figures for our own figures; never exponents above 1."""
    if value is None:
        return "–"
    if abs(value) >= 10 ** digits:
        return f"{value:.0f}"
    text = f"{value:.{digits}g}"
    if "e" in text:
        text = f"{value:.3e}"
    return text


def _t(text: str) -> TCell:
    return TCell(text)


def _value_cell(value: float | None, *, enforced: bool | None, noisy: bool = False,
                best: bool = False, reference: bool = False, published: str = "") -> TCell:
    text = published or fmt(value)
    if value is not None and enforced is False:
        text = f"({text})"
    if noisy and value is not None:
        text += NOISY_MARK
    return TCell(text, value, best=best, unenforced=enforced is False, noisy=noisy,
                 reference=reference)


FAILED_MARK = "✗"
FAILED_NOTE = (f"{FAILED_MARK} name: a run at this cap failed that validity check (hpcai-launch "
               "check FILE shows it) and is not in the figure; see \"Runs not included\".")


def failed_checks_by_cell(runs: list[Run] | None, cells: list[Cell]) -> dict[tuple, list[str]]:
    """(row's group, cap) -> names of the validity checks its left-out runs failed. A
    left-out run's row is its origin's (its sweep's run set: stats._series), never every
    run set of its configuration; an origin with no usable run keeps the row without one."""
    failed = [r for r in runs or [] if r.failed_checks and not r.usable and r.cap_read]
    if not failed:  # the usual case: no row map over every run (a fleet's 100,000)
        return {}
    rows = {(with_series(c.group, ""), origin(r)): c.group for c in cells for r in c.runs}
    found: dict[tuple, list[str]] = {}
    for run in failed:
        group = group_of(run)
        names = found.setdefault((rows.get((group, origin(run)), group), run.cap_w), [])
        names += [n for n in run.failed_checks if n not in names]
    return found


def _mark_failed(tcell: TCell, names: list[str] | None) -> TCell:
    if names:
        tcell.failed = list(names)
        tcell.text += f" {FAILED_MARK} " + ", ".join(names)
    return tcell


def _with_tiers(table: Table, row_runs: list[list[Run]]) -> Table:
    """The tier note; where rows stand on different tiers, a Tier column too."""
    runs = [r for rr in row_runs for r in rr]
    table.notes.append(tiers.note(runs))
    if tiers.mixed(runs):
        table.header.append(tiers.HEADER)
        table.plain_columns = (*table.plain_columns, tiers.HEADER)
        for row, rr in zip(table.rows, row_runs):
            row.append(_t(tiers.row_label(rr)))
    return table


def cells_by_group(cells: list[Cell]) -> dict:
    """group -> {cap: cell}, in the cells' order (one pass; the tables look rows up in it)."""
    index: dict = {}
    for cell in cells:
        index.setdefault(cell.group, {})[cell.cap_w] = cell
    return index


def _with_site(cells: list[Cell]) -> bool:
    return len({c.group.site for c in cells}) > 1


def _origin_column(cells: list[Cell], runs: list[Run] | None) -> bool:
    """An Origin column where several origins meet (report/cell_origins.py)."""
    return cell_origins.wanted(runs if runs is not None else [r for c in cells for r in c.runs])


def _with_origin(table: Table, origins: bool) -> Table:
    if origins:
        table.header.append(cell_origins.HEADER)
        table.plain_columns = (cell_origins.HEADER,)
        table.notes.append(cell_origins.NOTE)
    return table


def throughput_tables(cells: list[Cell], analyses: list[Analysis],
                      reference: list[RefPoint] | None, runs: list[Run] | None = None) -> list[Table]:
    """One table per unit (images/s, tokens/s), as the paper's Tables 3 and 4.
    runs: every run read; a cell names the validity checks its left-out runs failed."""
    tables = []
    best = {a.group: a.best for a in analyses}
    sites = _with_site(cells)
    failed = failed_checks_by_cell(runs, cells)
    origins = _origin_column(cells, runs)
    # With no results of ours, the reference's tables alone.
    units = sorted(({c.group.unit for c in cells} | {g.unit for g, _ in failed})
                   or {p.unit for p in reference or []})
    workloads = ({workload_key(c.group.workload) for c in cells}
                 or {workload_key(p.workload) for p in reference or []})
    for unit in units:
        mine = [c for c in cells if c.group.unit == unit]
        # The paper's rows only beside workloads measured here.
        refs = [p for p in reference or [] if p.unit == unit
                and workload_key(p.workload) in workloads]
        mine_failed = {k: v for k, v in failed.items() if k[0].unit == unit}
        caps = sorted({c.cap_w for c in mine} | {p.cap_w for p in refs}
                      | {cap for _, cap in mine_failed}, key=cap_sort_key)
        header = ["Workload", "GPU", *[cap_label(c) for c in caps]]
        rows, why_not = [], []
        # Configurations whose every run failed a check still get their row, to say so.
        groups = list(dict.fromkeys([c.group for c in mine] + [g for g, _ in mine_failed
                                                               if g not in {c.group for c in mine}]))
        index = cells_by_group(mine)  # once: a lookup per row was quadratic in the rows
        for group in groups:
            by_cap = index.get(group, {})
            row = [_t(group.workload_label()), _t(group.device_label(sites))]
            for cap in caps:
                cell = by_cap.get(cap)
                tcell = (_value_cell(cell.throughput, enforced=cell.enforced, noisy=cell.noisy,
                                     best=cell is best.get(group)) if cell else _t("–"))
                row.append(_mark_failed(tcell, failed.get((group, cap))))
            if refs:
                _beside_the_paper(row[2:], group, [by_cap.get(cap) for cap in caps], caps, refs,
                                  why_not)
            if origins:
                row.append(_t(cell_origins.row_text(list(by_cap.values()))))
            rows.append(row)
        rows += [row + [_t(cell_origins.PAPER)] if origins else row
                 for row in _paper_rows(refs, caps)]
        if not rows:
            continue
        notes = _throughput_notes(mine, bool(mine_failed), refs, why_not)
        key = "throughput-" + unit.split("/")[0]
        tables.append(_with_origin(Table(key, UNIT_TITLES.get(unit, unit), header, rows, notes,
                                         flag_columns=True), origins))
    return tables


def _paper_rows(refs: list[RefPoint], caps: list) -> list[list]:
    """The seed paper's rows of one unit's table, one per workload and GPU."""
    rows = []
    for (workload, gpu) in dict.fromkeys((p.workload, p.gpu) for p in refs):
        by_cap = {p.cap_w: p for p in refs if p.workload == workload and p.gpu == gpu}
        row = [_t(workload), _t(f"{gpu} (paper)")]
        for cap in caps:
            p = by_cap.get(cap)
            # Per GPU, as our rows: the paper's node totals divided by their GPUs;
            # a per-GPU figure is shown exactly as the paper prints it.
            row.append(_value_cell(p.per_gpu, enforced=p.enforced, reference=True,
                                   published=p.published if p.gpus == 1 else "")
                       if p else _t("–"))
        rows.append(row)
    return rows


def _throughput_notes(mine: list[Cell], any_failed: bool, refs: list[RefPoint],
                      why_not: list[str]) -> list[str]:
    notes = [("Values in parentheses: the cap was not enforced (median power above the "
             "cap plus its tolerance), as the seed paper prints them."), BOLD_NOTE,
             PRECISION_NOTE,
             ("On CPU runs the throughput is per process and power was not measured unless "
             "RAPL was readable.")]
    if any_failed:
        notes.append(FAILED_NOTE)
    if any(c.noisy for c in mine):
        notes.append(f"{NOISY_MARK}: noisy (coefficient of variation above the threshold; see the "
                     "statistics table).")
    return notes + ref.notes(refs, with_ours=bool(mine)) + why_not


def _beside_the_paper(tcells: list[TCell], group, cells: list, caps: list,
                      refs: list[RefPoint], why_not: list[str]) -> None:
    """Ours / paper beside each of our cells where the paper has the same workload,
    GPU and cap and our runs are its configuration; else a note saying why not."""
    reasons = []
    for tcell, cell, cap in zip(tcells, cells, caps):
        point = ref.matching_point(refs, workload_key(group.workload), group.device, cap)
        if cell is None or point is None:
            continue
        comparable, why = ref.cell_comparability(cell)
        if not comparable:
            reasons.append(why)
            continue
        ours, basis = ref.like_for_like(cell)  # the paper's accounting where recorded
        text, ratio = ref.ratio_text(ours, point)
        tcell.text += f" [{text} paper" + (", paper acct.]" if basis == "paper's accounting" else "]")
        tcell.ratio = ratio
    if reasons:
        why_not.append(f"{group.workload_label()} on {group.device_label()}: not comparable with "
                       f"the paper's row, so no ratio: {reasons[0]}.")


def efficiency_tables(cells: list[Cell], analyses: list[Analysis], overhead_note: str,
                      runs: list[Run] | None = None) -> list[Table]:
    """The same layout, work per joule with the node overhead; the best cap marked."""
    tables = []
    failed = failed_checks_by_cell(runs, cells)
    best = {a.group: a.best for a in analyses}
    sites = _with_site(cells)
    origins = _origin_column(cells, runs)
    for unit in sorted({c.group.unit for c in cells}):
        mine = [c for c in cells if c.group.unit == unit and c.power_available]
        if not mine:
            continue
        caps = sorted({c.cap_w for c in mine}, key=cap_sort_key)
        work = unit.split("/")[0]
        rows, row_runs = [], []
        index = cells_by_group(mine)
        for group in index:
            by_cap = index[group]
            row_runs.append([r for c in by_cap.values() for r in c.runs])
            row = [_t(group.workload_label()), _t(group.device_label(sites))]
            for cap in caps:
                cell = by_cap.get(cap)
                tcell = (_value_cell(cell.efficiency.mean, enforced=cell.enforced,
                                     noisy=cell.noisy, best=cell is best.get(group))
                         if cell else _t("–"))
                row.append(_mark_failed(tcell, failed.get((group, cap))))
            if origins:
                row.append(_t(cell_origins.row_text(list(by_cap.values()))))
            rows.append(row)
        tables.append(_with_tiers(_with_origin(Table(
            f"efficiency-{work}", f"Energy efficiency ({work} per joule, node overhead included)",
            ["Workload", "GPU", *[cap_label(c) for c in caps]], rows,
            [overhead_note, BOLD_NOTE, PRECISION_NOTE], flag_columns=True), origins), row_runs))
    return tables


def recommendation_table(analyses: list[Analysis], max_slowdown: float,
                         objective: str = "energy") -> Table:
    sites = len({a.group.site for a in analyses}) > 1
    least = {"energy": "least energy", "cost": "least facility cost",
             "co2": "least CO2"}.get(objective)
    header = ["Workload", "GPU", "Most efficient cap", "Fastest cap",
              f"Recommended ({least} within {max_slowdown:.0%} of the fastest)" if least
              else "Recommended (least energy × time)",
              "Throughput cost", "Energy saved", "Least energy × time", "Pareto front (caps)"]
    rows, unranked = [], []
    for a in analyses:
        row = [_t(a.group.workload_label()), _t(a.group.device_label(sites))]
        if a.best is None:
            unranked.append(f"{a.group.workload_label()} on {a.group.device_label(sites)}")
            continue
        fastest, rec = a.fastest, a.recommended
        # The cells' values are what recommendations.csv holds: caps in W, shares as fractions.
        row.append(TCell(f"{a.best.cap_label} ({fmt(a.best.efficiency.mean)} {_work(a)}/J)", a.best.cap_w))
        row.append(TCell(f"{fastest.cap_label} ({fmt(fastest.throughput)} {a.group.unit})", fastest.cap_w))
        row.append(TCell(rec.cap_label, rec.cap_w))
        cost = 1 - rec.throughput / fastest.throughput if fastest.throughput else None
        saved = 1 - fastest.efficiency.mean / rec.efficiency.mean if rec.efficiency.mean else None
        row.append(TCell(f"{cost:.1%}" if cost is not None else "–", cost))
        row.append(TCell(f"{saved:.1%}" if saved is not None else "–", saved))
        row.append(TCell(a.min_edp.cap_label, a.min_edp.cap_w) if a.min_edp else _t("–"))
        row.append(_t(", ".join(c.cap_label for c in a.pareto)))
        rows.append(row)
    notes = [("Throughput cost and energy saved compare the recommended cap with the fastest "
             "one; energy saved is per unit of work, node overhead included."),
             ("Least energy × time: the cap with the smallest energy-delay product for a fixed "
             "amount of work.")]
    notes += [f"{a.group.workload_label()} on {a.group.device_label(sites)}: {n}"
              for a in analyses for n in a.notes if a.best is not None]
    if unranked:
        notes.insert(0, "No best cap for " + "; ".join(unranked) + ": power was not measured "
                     "(CPU runs without readable RAPL, or runs without telemetry), so there is "
                     "no work per joule to rank caps by.")
    notes.append(tiers.note([r for a in analyses for c in a.candidates for r in c.runs]))
    return Table("recommendations", "Best cap per workload and GPU", header, rows, notes)


def _work(a: Analysis) -> str:
    return a.group.unit.split("/")[0]


def fixed_work_table(analyses: list[Analysis], work: dict[str, float]) -> Table | None:
    sites = len({a.group.site for a in analyses}) > 1
    header = ["Workload", "GPU", "Cap", "Work", "Node energy (kWh)", "Time (h)",
              "Energy × time (kWh·h)", "EDP per unit (J·s)"]
    # A row per candidate cap (a fleet's: tens of thousands): made column by column.
    labels, work_texts, caps, kwh, hours, edp, least = [], [], [], [], [], [], []
    for a in (a for a in analyses if a.candidates):
        units = work[a.group.unit]
        label = (a.group.workload_label(), a.group.device_label(sites))
        amount = f"{units:,.0f} {_work(a)}"
        for cell in a.candidates:
            fw = fixed_work(cell, units)
            if fw is None:
                continue
            labels.append(label)
            work_texts.append(amount)
            caps.append(cell.cap_label)
            kwh.append(fw.energy_j / 3.6e6)
            hours.append(fw.time_s / 3600)
            edp.append(edp_per_unit(cell))
            least.append(cell is a.min_edp)
    if not labels:
        return None
    product = [k * h for k, h in zip(kwh, hours)]
    workloads, devices = zip(*labels)
    columns = [text_column(list(workloads)), text_column(list(devices)), text_column(caps),
               text_column(work_texts), _number_column(kwh), _number_column(hours),
               _number_column(product), _number_column(edp)]
    rows, more = split_columns(columns, TCell)
    for row, best in zip(rows, least):  # bold on the pages: least energy × time
        row[2].best = row[6].best = best
    return Table("fixed-work", "Energy and time for a fixed amount of work (one node)", header,
                 rows, [("Energy is the node's: measured at the node where a node power "
                        "source measured it, else its GPUs plus the node overhead (see "
                        "Measurement boundaries). Time is at the node's throughput (all its "
                        "GPUs). Bold: least energy × time."),
                        "Change the amount with --work.",
                        tiers.note([r for a in analyses for c in a.candidates for r in c.runs])],
                 more=more)


def _number_column(values: list) -> tuple[list[str], list]:
    """A column of our figures: fmt's texts and the values."""
    return list(map(fmt, values)), values


def _group_labels(cells: list[Cell], sites: bool) -> tuple[list[str], list[str]]:
    """Each cell's workload and device labels (a row's cells share a group: one label each)."""
    labels = {g: (g.workload_label(), g.device_label(sites))
              for g in dict.fromkeys(c.group for c in cells)}
    workloads, devices = zip(*(labels[c.group] for c in cells))
    return list(workloads), list(devices)


def _interval_text(cell: Cell, n: int, half: float | None) -> str:
    """"± 12.3 (n = 5 epochs)"; an interval that reaches below zero (two epochs: t = 12.7)
    says nothing a throughput can be, so it says there are too few instead."""
    if half is None:
        return "–"
    if cell.throughput is not None and cell.throughput - half < 0:
        return f"too few {cell.basis} for an interval (n = {n})"
    return f"± {fmt(half)} (n = {n} {cell.basis})"


def stats_table(cells: list[Cell]) -> Table:
    sites = _with_site(cells)
    header = ["Workload", "GPU", "Cap", "Enforced", "Repeats", "Epochs", "Throughput per GPU",
              "95% CI", "CV", "Noisy", "Power per GPU (W)", "Node power (W)", "Work/J (GPUs)",
              "Work/J (with overhead)", "SM clock (MHz)", "Memory clock (MHz)"]
    # A row per cell (a fleet's: tens of thousands): made column by column.
    workloads, devices = _group_labels(cells, sites)
    spreads = [c.spread for c in cells]
    half = [s.half_width for s in spreads]
    cv = [s.cv for s in spreads]
    power = [c.mean_power_w for c in cells]
    per_gpu_w = [w / c.group.processes if w is not None and c.group.device_type == "cuda" else None
                 for c, w in zip(cells, power)]
    enforced = {True: "yes", False: "no", None: "–"}
    columns = [
        text_column(workloads), text_column(devices), text_column([c.cap_label for c in cells]),
        text_column([enforced[c.enforced] for c in cells]),
        text_column([str(c.repeats.n) for c in cells]), text_column([str(c.epochs.n) for c in cells]),
        _number_column([c.throughput for c in cells]),
        ([_interval_text(c, s.n, h) for c, s, h in zip(cells, spreads, half)], half),
        ([f"{v:.1%}" if v is not None else "–" for v in cv], cv),
        text_column(["yes" if c.noise else "no" for c in cells]),
        _number_column(per_gpu_w), _number_column(power),
        _number_column([c.gpu_efficiency for c in cells]),
        _number_column([c.efficiency.mean for c in cells]),
        _number_column([c.sm_clock_mhz for c in cells]),
        _number_column([c.memory_clock_mhz for c in cells])]
    rows, more = split_columns(columns, TCell)
    for row, c in zip(rows, cells):  # marked on the pages
        row[9].noisy = c.noisy
    noise = [f"{w} on {d} at {c.cap_label}: " + "; ".join(c.noise) + "."
             for c, w, d in zip(cells, workloads, devices) if c.noise]
    return Table("statistics", "Statistics per cell", header, rows,
                 [("Throughput per GPU: one run's measured work over its measured time, or the "
                  "mean of that figure over the repeats of one sweep. 95% CI: the half-width "
                  "of the Student-t interval around that same value, from the n repeats when "
                  "there are two or more, else from the run's n measured epochs; CV from the "
                  "same n (the CSV files give the standard deviation)."),
                  ("Power per GPU: the node's mean GPU power over its GPUs; node power: all of "
                  "them together (CPU runs: the package power RAPL read, per node)."),
                  PRECISION_NOTE, *noise], more=more)


def excluded_table(runs: list[Run]) -> Table | None:
    left_out = [r for r in runs if not r.usable]
    if not left_out:
        return None
    columns = [text_column([r.run_id for r in left_out]), text_column([r.workload for r in left_out]),
               text_column([r.device for r in left_out]), text_column([_run_cap(r) for r in left_out]),
               text_column([r.status for r in left_out]),
               text_column(["; ".join(r.problems) or status_reason(r) for r in left_out]),
               text_column([shown_path(r.path) for r in left_out])]
    rows, more = split_columns(columns, TCell)
    return Table("excluded-runs", "Runs not included (not complete, or not valid)",
                 ["Run", "Workload", "Device", "Cap", "Status", "Why", "File"], rows,
                 [("These are listed, never averaged: a failed or interrupted run measured "
                  "only part of its protocol.")], more=more)


def _run_cap(run: Run) -> str:
    """"uncapped" only for a run whose file says so; "?" where it could not be read."""
    return cap_label(run.cap_w) if run.cap_read else "?"


def status_reason(run: Run) -> str:
    return {"failed": "the run failed", "interrupted": "the run was interrupted",
            "running": "the run never finished (its launcher died)"}.get(run.status, run.status)


def runs_table(runs: list[Run]) -> Table:
    header = ["Run", "Workload", "Preset", "Device", "Site", "Cap", "Repeat", "Status",
              "Throughput per GPU", "Work/J (with overhead)", "File"]
    usable = [r.usable for r in runs]
    # A failed, interrupted or invalid run's figures cover part of a protocol, or
    # nothing sound: never printed beside measured values.
    per_gpu = [r.per_gpu if ok else None for r, ok in zip(runs, usable)]
    eff = [r.units_per_joule_with_overhead if ok else None for r, ok in zip(runs, usable)]
    columns = [text_column([r.run_id for r in runs]), text_column([r.workload for r in runs]),
               text_column([r.preset for r in runs]), text_column([r.device_full for r in runs]),
               text_column([r.site for r in runs]), text_column([_run_cap(r) for r in runs]),
               text_column(["–" if r.repeat is None else str(r.repeat + 1) for r in runs]),
               text_column([r.status if not r.problems else f"{r.status} (invalid)" for r in runs]),
               _number_column(per_gpu), _number_column(eff),
               text_column([shown_path(r.path) for r in runs])]
    if any(r.sm_clock_cap_mhz is not None or r.mem_clock_cap_mhz is not None for r in runs):
        from hpcai.launcher.run.plan import clock_label

        header.insert(6, "Clock caps")  # only where some run capped clocks
        columns.insert(6, text_column([clock_label(r.sm_clock_cap_mhz, r.mem_clock_cap_mhz) or "own"
                                 for r in runs]))
    rows, more = split_columns(columns, TCell)
    notes = ["Figures only for complete, valid runs; the others are listed with why under "
             "\"Runs not included\"."] if not all(usable) else []
    return Table("runs", "Every run read", header, rows, notes, more=more)


def idle_table(sweeps) -> Table | None:
    rows = []
    for sweep in sweeps:
        idle = sweep.doc.get("idle_baseline") or {}
        devices = idle.get("devices") or []
        per = ", ".join(f"{d.get('name')} {fmt(d.get('mean_power_w'))} W" for d in devices)
        rows.append([_t(sweep.doc.get("sweep_id", sweep.path.parent.name)),
                     _t(fmt(idle.get("total_power_w")) if idle.get("available") else "–"),
                     _t(per or (idle.get("reason") or "not measured")),
                     _t(f"{idle.get('seconds', 0):.1f} s"),
                     _t(", ".join(f"{n} {status}" for status, n in
                                  (sweep.doc.get("counts") or {}).items()) or "–"),
                     _t(str(sweep.doc.get("status")))])
    if not rows:
        return None
    return Table("sweeps", "Sweeps and their idle baselines",
                 ["Sweep", "Idle power, node (W)", "Per device", "Measured for", "Runs", "Status"],
                 rows, ["Idle power is measured once per sweep, before its first run."])
