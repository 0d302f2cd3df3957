"""`hpcai-launch report`: from result files to tables, efficiency, the best
cap and plots, written as Markdown, CSV, JSON and one offline HTML page.

load -> stats (cells) -> efficiency (best cap, Pareto, recommendation) ->
tables -> plots -> outputs/html. Nothing here imports matplotlib until the
plots are drawn.

`report` makes it in a forked worker (report/forked.py), which forks the
figures' worker before it reads a result. That worker gets a compact copy of
the cells once they are made: it draws the plots (or keeps those drawn from the
same inputs before: report/kept_plots.py), writes cells.csv and the cells' and
best caps' part of report.json, and, if it is free before this process is,
makes the tables made from the cells alone (CELL_TABLES), while the other tables
and data files are made here.
"""
from __future__ import annotations

from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import ResultError

# The options, the parts and the loading live in report/parts.py, which the planner
# imports without this module (which imports the planner for --mix: no cycle).
from hpcai.launcher.report.parts import ReportOptions, _Parts, load_results  # noqa: F401

__all__ = ["ReportOptions", "build_report", "load_results", "make_report"]


def build_report(paths: list, opts: ReportOptions) -> int:
    """The CLI's entry: make the report and say where it is."""
    from hpcai.launcher.report.forked import ForkedCall
    from hpcai.launcher.report.load import shown_path

    # Made in a forked worker: a fleet's report holds hundreds of MB in millions of
    # objects, given back to the system at once when the worker ends instead of being
    # freed one by one (most of a second at 100,000 results).
    worker = ForkedCall(_made_in_worker, paths, opts, capture=True, retry=False)
    try:
        written = worker.result()
    finally:
        worker.close()  # interrupted while waiting: the worker goes too
    out = shown_path(Path(opts.output))
    print(f"report of {written['runs']} run(s) ({written['usable']} complete and valid) "
          f"in {out}:")
    for name in ("markdown", "html", "json"):
        print(f"  {shown_path(written[name])}")
    print(f"  {len(written['csv'])} CSV file(s), {len(written['plots'])} plot(s) in {out}/plots")
    if written.get("plan"):
        print(f"  plan for the mix: {shown_path(written['plan']['paths']['html'])}")
    for line in written["skipped_plots"]:
        print(f"  no plot: {line}")
    shown = 20  # thousands of broken files or copies: the first, then the count
    for line in written["excluded"][:shown]:
        print(f"  not included: {line}")
    if len(written["excluded"]) > shown:
        print(f"  not included: … and {len(written['excluded']) - shown} more, listed under "
              f"\"Runs not included\" in {shown_path(written['html'])}")
    if not written["usable"] and not (opts.reference and written["runs"] == 0):
        # The report still lists every input with why; but it measured nothing.
        # (--reference over no results at all is the paper's tables alone.)
        raise ResultError(f"no complete, valid result among the {written['runs']} file(s) read",
                          f"see why under \"Runs not included\" in {shown_path(written['html'])}")
    return 0


_KEPT: list = []  # in build_report's worker: the report's parts, never freed (it ends with os._exit)
# Tables made from the cells alone, a row per cell (33,000 in a fleet's report), made
# by whichever is free first: the figures' worker, which has the cells (and is idle
# while the other tables are made here where its plots are kept), or this process:
# their role in _Parts.named -> their key (their CSV's name).
CELL_TABLES = {"fixed": "fixed-work", "statistics": "statistics"}


def _made_in_worker(paths: list, opts: ReportOptions) -> dict:
    from hpcai.launcher.bundles.temp import remove_own

    try:
        return make_report(paths, opts, keep=_KEPT)
    finally:
        remove_own()  # the bundles it unpacked: the worker ends with os._exit, no atexit


class _FiguresWorker:
    """The figures (matplotlib: seconds at any size) and the cells' files, made by a
    worker on another core while the tables and the other files are made here. It is
    forked first, before any result is read, and gets compact copies through pipes (the
    cells, then what the studies draw): a child forked later would share the results'
    memory, and CPython's reference counts, written on every use, would copy it page
    by page into both processes. Its parts of report.json go into files made here,
    unnamed, that it inherits."""

    def __init__(self):
        import tempfile

        from hpcai.launcher.report.forked import Claim, ForkedCall, Inbox

        self.cells_given, self.studies_given = Inbox(), Inbox()
        self.json_files = {key: tempfile.TemporaryFile()
                           for key in ("cells", "best_caps", *CELL_TABLES.values())}
        # The cells' tables are made by whichever is free first: the worker once its plots
        # are done (at once where they are kept), else this process after its own tables.
        self.cell_tables = Claim()
        self.call = ForkedCall(_figures, self.cells_given, self.studies_given, self.json_files,
                               self.cell_tables, inbox=(self.cells_given, self.studies_given))

    def close(self) -> None:
        for closing in (self.call, self.cells_given, self.studies_given, self.cell_tables,
                        *self.json_files.values()):
            closing.close()


def make_report(paths: list, opts: ReportOptions, keep: list | None = None) -> dict:
    """The report of the results under paths, written under opts.output; keep: a list
    the report's parts are added to, for a process that ends without freeing them."""
    from hpcai.launcher.report import plan_screen
    from hpcai.launcher.report.facility import override_facility
    from hpcai.launcher.cli.progress import Progress

    import gc

    override, planned = plan_screen.given_at_report_time(opts)  # checked before anything is written
    worker = _FiguresWorker()
    # Runs (100,000 in a fleet's report), cells, tables and records hold no cycles: the
    # collector is off while they are made (its passes over them cost seconds and free
    # nothing), and they are frozen so that a collection elsewhere never walks them.
    collecting = gc.isenabled()
    gc.disable()
    progress = Progress("report", 4).start()  # after the fork: the worker has no ticker
    try:
        progress.step("reading the results")
        parts = load_results(paths, opts)
        gc.freeze()
        parts.facility_note = override_facility(parts.runs, override)
        progress.step("statistics and tables")
        _analyse(parts, opts)
        parts.plan = plan_screen.write(parts, planned, paths)  # {} without --mix
        worker.cells_given.send(_cell_inputs(parts))
        _studies(parts, opts.power_run)
        worker.studies_given.send(_study_inputs(parts))
        _tabulate(parts, opts)
        made_here = worker.cell_tables.take()
        if made_here:  # the worker is still drawing
            _tabulate_cells(parts)
        csv_written = _write_csvs(parts)
        meta = _meta(parts, opts)
        progress.step("the figures")
        csv_paths = _with_the_figures(parts, worker, made_here, csv_written)
        progress.step("the pages")
        sections = _sections(parts)
        md_path, html_path = _write_pages(parts.out, opts.title, meta, sections)
        json_path = _write_json(parts, opts, paths)
    finally:
        progress.stop()
        worker.close()
        if keep is None:  # a worker that ends at once needs no collector (a full pass: 0.4 s)
            gc.unfreeze()
            if collecting:
                gc.enable()
    if keep is not None:
        keep.append(parts)
    return _made(parts, md_path, html_path, json_path, csv_paths)


def _with_the_figures(parts: _Parts, worker: _FiguresWorker, made_here: bool, csv_written: dict) -> list:
    """The worker's figures and tables taken in, the cells' tables made here if it died;
    every table's CSV path, in the report's order."""
    made = worker.call.result()
    _take_figures(parts, made, worker.json_files)
    if made["tables"] is None and not made_here:  # a worker that died took the claim
        _tabulate_cells(parts)
    parts.all_tables = _all_tables(parts)  # now with the worker's tables
    csv_written.update(parts.worker_csvs)
    csv_written.update(_write_csvs(parts, [t for t in parts.all_tables  # made since
                                           if t.key not in csv_written]))
    return [csv_written[t.key] for t in parts.all_tables] + [parts.cells_csv]


def _made(parts: _Parts, md_path, html_path, json_path, csv_paths: list) -> dict:
    """What make_report returns: the files written, and the runs left out, with why."""
    from hpcai.launcher.report.load import shown_path
    from hpcai.launcher.report.tables import status_reason

    return {"markdown": md_path, "html": html_path, "json": json_path, "csv": csv_paths,
            "plots": parts.plots, "skipped_plots": parts.skipped, "runs": len(parts.runs),
            "usable": parts.usable, "plan": parts.plan,
            "excluded": [f"{shown_path(r.path)} ({r.status}): "
                         f"{'; '.join(r.problems) or status_reason(r)}"
                         for r in parts.runs if not r.usable]}


def _analyse(parts: _Parts, opts: ReportOptions) -> None:
    from hpcai.launcher.report.efficiency import DEFAULT_WORK, analyse
    from hpcai.launcher.report.facility import apply_objective
    from hpcai.launcher.report.stats import aggregate

    parts.cells = aggregate(parts.runs, opts.node_overhead_w, opts.noisy_cv, opts.combine_runs)
    parts.analyses = analyse(parts.cells, opts.max_slowdown)
    parts.work = {unit: opts.work or amount for unit, amount in DEFAULT_WORK.items()}
    from hpcai.launcher.report.efficiency import default_work

    for cell in parts.cells:  # exec's units (solutions, --units): their own default
        parts.work.setdefault(cell.group.unit, opts.work or default_work(cell.group.unit))
    parts.overhead = overhead_note(parts.runs, opts.node_overhead_w)
    parts.objective_note = apply_objective(parts.analyses, opts.objective, opts.max_slowdown)


def _tabulate(parts: _Parts, opts: ReportOptions) -> None:
    from hpcai.launcher.report import tables
    from hpcai.launcher.report.boundaries import boundaries_table
    from hpcai.launcher.report.clocks import clock_table
    from hpcai.launcher.report.facility import facility_table
    from hpcai.launcher.report.origins import origins_table, sites_table

    cells, analyses, runs = parts.cells, parts.analyses, parts.runs
    named = parts.named
    named["throughput"] = tables.throughput_tables(cells, analyses, parts.reference, runs)
    named["clocks"] = clock_table(cells)  # None unless a result capped clocks
    named["efficiency"] = tables.efficiency_tables(cells, analyses, parts.overhead, runs)
    named["recommendations"] = tables.recommendation_table(
        analyses, opts.max_slowdown, opts.objective) if analyses else None
    from hpcai.launcher.report.binding_table import binding_table
    named["cap_binding"] = binding_table(analyses)  # None unless a capped run measured power
    from hpcai.launcher.report.serving_table import serving_table
    named["serving_phases"] = serving_table(cells)  # None unless a serving run split its phases
    named.update(dict.fromkeys(CELL_TABLES))  # _tabulate_cells, here or in the worker
    named["facility"] = facility_table(analyses, parts.work)
    named["boundaries"] = boundaries_table(runs)
    named["excluded"] = tables.excluded_table(runs)
    named["sweeps"] = tables.idle_table(parts.sweeps)
    named["runs"] = tables.runs_table(runs)
    named["origins"], named["sites"] = origins_table(runs), sites_table(runs)


def _tabulate_cells(parts: _Parts) -> None:
    """CELL_TABLES, made here (the figures' worker makes them when it is free first)."""
    parts.named.update(_make_cell_tables(parts.cells, parts.analyses, parts.work))


def _make_cell_tables(cells: list, analyses: list, work: dict) -> dict:
    """CELL_TABLES by role (None: no such table)."""
    from hpcai.launcher.report import tables

    return {"fixed": tables.fixed_work_table(analyses, work),
            "statistics": tables.stats_table(cells) if cells else None}


def _all_tables(parts: _Parts) -> list:
    """Every table made so far, in the report's order (its CSVs', report.json's)."""
    named = parts.named
    roof_tables, study_tables = parts.roof[0], parts.study[0]
    return [t for t in (named["origins"], named["sites"],
        *named["throughput"], named["clocks"], *named["efficiency"], named["recommendations"],
        named["cap_binding"], named["serving_phases"],
        named["fixed"], named["facility"], named["boundaries"], named["statistics"],
        named["excluded"], named["sweeps"], named["runs"],
        *roof_tables, *(t for key in study_tables for t in study_tables[key])) if t is not None]


def _studies(parts: _Parts, power_run: str | None) -> None:
    """The roofline's and the scaling studies' tables and notes, and what the plots need:
    small, made here, so that the figures' child never reads a fleet's runs (each object
    it touches is copied into it: CPython's reference counts are in the objects)."""
    from hpcai.launcher.report import roofline, scaling
    from hpcai.launcher.report.plots import pick_power_run

    roof_tables, roof_notes, parts.roof_points = roofline.section(parts.runs, parts.reference)
    parts.roof = (roof_tables, [], [], roof_notes)
    study_tables, study_notes, parts.study_drawing = scaling.section(parts.runs, parts.cells,
                                                                     parts.work)
    parts.study = (study_tables, {key: [] for key in study_tables}, study_notes)
    parts.power_run = pick_power_run(parts.runs, parts.analyses, power_run)


def _cell_inputs(parts: _Parts) -> dict:
    """What the figures' worker needs of the cells, without the runs: the cells and
    analyses copied with no runs in them (the same objects stay the same: a row's best
    cell is one of its cells), each cell's run ids, and what the plots compare with."""
    import dataclasses

    slim = {id(c): dataclasses.replace(c, runs=[]) for c in parts.cells}

    def cell(c):
        return None if c is None else slim[id(c)]

    analyses = [dataclasses.replace(a, cells=[cell(c) for c in a.cells],
                                    candidates=[cell(c) for c in a.candidates],
                                    best=cell(a.best), fastest=cell(a.fastest),
                                    recommended=cell(a.recommended), min_edp=cell(a.min_edp),
                                    pareto=[cell(c) for c in a.pareto])
                for a in parts.analyses]
    return {"out": parts.out, "cells": list(slim.values()), "analyses": analyses,
            "run_ids": [[r.run_id for r in c.runs] for c in parts.cells],
            "work": parts.work, "reference": parts.reference}


def _study_inputs(parts: _Parts) -> dict:
    """What the figures' worker draws of the studies: small, made here."""
    return {"power_run": parts.power_run, "roof_points": parts.roof_points,
            "study_drawing": parts.study_drawing}


def _figures(cells_given, studies_given, json_files: dict, cell_tables) -> dict:
    """From the Inboxes' values (_cell_inputs, then _study_inputs): every plot as PNG
    and SVG under the report's plots/ (or, drawn from the same inputs by the last
    report there, kept: report/kept_plots.py), cells.csv, the cells' and best caps'
    parts of report.json (json_stream.write_part, into json_files), and the cells'
    tables where cell_tables (a forked.Claim) is still free."""
    import gc

    from hpcai.launcher.report import outputs, roofline, scaling
    from hpcai.launcher.report.json_stream import write_part
    from hpcai.launcher.report.kept_plots import KeptPlots
    from hpcai.launcher.report.plots import cell_plots, power_plots

    collecting = gc.isenabled()
    gc.disable()  # the cells and their records hold no cycles
    try:
        given = cells_given.receive()
        out, cells, analyses = given["out"], given["cells"], given["analyses"]
        # The plots first: where they must be drawn, the report makes the cells' tables
        # meanwhile, and the cells' files below take less time than drawing.
        # matplotlib's figures hold cycles: the collector runs while they are drawn, over
        # new objects only (the cells are frozen), and once more after them.
        gc.freeze()
        gc.enable()
        # Plots drawn from the same pickles by the last report into this folder are kept.
        kept = KeptPlots(out / "plots")
        plots, skipped = kept.draw("cells", cells_given.digest, cell_plots, cells, analyses,
                                   given["reference"])
        studied, digest = studies_given.receive(), studies_given.digest
        # The power plot reads its run's samples file, which no pickle holds: always drawn.
        more, not_drawn = power_plots(out / "plots", studied["power_run"])
        roof_plots, roof_skipped = (kept.draw("roofline", digest, roofline.roofline_plots,
                                              studied["roof_points"])
                                    if studied["roof_points"] else ([], []))
        made = dict(plots=plots + more, skipped=skipped + not_drawn, roof_plots=roof_plots,
                    roof_skipped=roof_skipped,
                    study_plots=kept.draw("studies", digest, scaling.draw, studied["study_drawing"]))
        kept.save()
        gc.collect()  # drawn in this process (no fork): their cycles go now, not at exit
        gc.disable()  # the records and tables hold no cycles
        by_group = {a.group: a for a in analyses}
        records = (outputs.cell_record(c, by_group.get(c.group), ids)
                   for c, ids in zip(cells, given["run_ids"]))
        made["cells_csv"] = outputs.write_cells(records, out, json_files["cells"])
        write_part((outputs.analysis_record(a, given["work"]) for a in analyses), 1,
                   json_files["best_caps"])
        made["tables"] = (_cell_tables_in_worker(given, json_files) if cell_tables.take()
                          else None)  # made by the report while the plots were drawn
        return made
    finally:
        gc.unfreeze()
        if not collecting:
            gc.disable()


def _cell_tables_in_worker(given: dict, json_files: dict) -> dict:
    """CELL_TABLES, made in the figures' worker from its copy of the cells: each one's
    CSV written, and its rows' part of report.json (json_stream.write_part, into
    json_files); given back with the rows the pages show, the others only counted
    (long_tables.RowCount). Role -> (table, CSV path), or None where there is none."""
    import dataclasses

    from hpcai.launcher.report import outputs
    from hpcai.launcher.report.json_stream import write_part
    from hpcai.launcher.report.long_tables import RowCount, all_texts

    out = given["out"]
    made = _make_cell_tables(given["cells"], given["analyses"], given["work"])
    for role, table in made.items():
        if table is not None:
            assert table.key == CELL_TABLES[role], table.key
            csv_path = outputs.write_table_csv(table, out)
            write_part(all_texts(table), 3, json_files[table.key])  # doc.tables.KEY.rows
            more = None if table.more is None else RowCount(len(table.more))
            made[role] = (dataclasses.replace(table, more=more), csv_path)
    return made


def _take_figures(parts: _Parts, made: dict, json_files: dict) -> None:
    """The figures' worker's files and plots (and those it could not draw) into parts."""
    from hpcai.launcher.report.json_stream import Part

    parts.cells_csv = made["cells_csv"]
    parts.json_parts = {key: Part(json_files[key]) for key in ("cells", "best_caps")}
    for role, made_table in (made["tables"] or {}).items():
        parts.named[role] = None
        if made_table is not None:
            table, parts.worker_csvs[table.key] = made_table
            parts.named[role] = table
            parts.rows_parts[table.key] = Part(json_files[table.key])
    roof_tables, _, _, roof_notes = parts.roof
    parts.roof = (roof_tables, made["roof_plots"], made["roof_skipped"], roof_notes)
    study_tables, _, study_notes = parts.study
    study_plots = made["study_plots"]
    parts.study = (study_tables, study_plots, study_notes)
    parts.plots = [*made["plots"], *made["roof_plots"],
                   *(p for key in study_tables for p in study_plots[key])]
    parts.skipped = [*made["skipped"], *made["roof_skipped"]]


def _meta(parts: _Parts, opts: ReportOptions) -> list[str]:
    """The lines under the title: inputs, node overhead, repeats, the best-cap rule."""
    from hpcai.launcher.report import tables

    runs = parts.runs
    usable = parts.usable = sum(r.usable for r in runs)
    parts.generated = now_iso()
    meta = [(f"Generated {parts.generated} from {len(runs)} result file(s): {usable} complete "
             f"and valid, {len(runs) - usable} listed but not included."),
            parts.overhead,
            ("Repeats: the runs of one sweep" + (", and independent runs of the same "
             "configuration (--combine-runs)." if opts.combine_runs else "; independent runs at "
             "a cap already measured form another row (run set 2, ...); --combine-runs takes "
             "them as repeats.")),
            (f"Recommended cap: least energy per unit of work within {opts.max_slowdown:.0%} of "
             f"the fastest enforced cap; noisy: coefficient of variation above "
             f"{opts.noisy_cv:.0%}." if opts.objective == "energy" else
             f"{parts.objective_note} Noisy: coefficient of variation above {opts.noisy_cv:.0%}."),
            "Devices: " + "; ".join(sorted({f"{r.device} = {r.device_full}" for r in runs
                                            if r.usable})) if usable else "No usable runs."]
    if parts.plan:  # the answer first: what to buy, which cap (report/plan_screen.py)
        from hpcai.launcher.report.plan_screen import first_screen

        meta[:0] = first_screen(parts.plan)
    if parts.facility_note:
        meta.append(parts.facility_note)
    unchecked = sum(1 for r in runs if r.usable and r.validity_verdict is None)
    if unchecked:
        meta.append(f"{unchecked} included result(s) predate validity checks (no `validity` "
                    "block): included as before (complete, schema-valid, finished by the "
                    "launcher); `hpcai-launch check FILE` evaluates them now.")
    if any(r.failed_checks for r in runs):
        meta.append("Results that failed a validity check are left out of every figure; "
                    f"{tables.FAILED_MARK} beside a cell names the check.")
    if parts.reference:
        meta.append("Reference: the seed paper's published throughput (Tables 3 and 4).")
    if not parts.cells:
        meta.append("No complete, valid result: nothing to tabulate.")
    return meta


def _sections(parts: _Parts) -> list[tuple[str, list]]:
    named = parts.named
    roof_tables, roof_plots, roof_skipped, roof_notes = parts.roof
    study_tables, study_plots, study_notes = parts.study
    studied = [p for key in study_plots for p in study_plots[key]]

    def present(*tables):
        return [t for t in tables if t]

    # Nothing measured power: one sentence why, not a table of dashes (report/no_power.py).
    from hpcai.launcher.report.no_power import best_cap_section

    return [("Best cap", best_cap_section(parts.runs, named["recommendations"])
             + present(named["cap_binding"])),
            ("Throughput per GPU", named["throughput"]),
            ("Clock caps", present(named["clocks"])),
            ("Energy efficiency", named["efficiency"]),
            ("Serving phases", present(named["serving_phases"])),
            ("Energy and time for a fixed amount of work", present(named["fixed"])),
            ("Facility energy, cost and emissions", present(named["facility"])),
            ("Measurement boundaries", present(named["boundaries"])),
            ("Trends against problem size", [*study_tables["trends"], *study_plots["trends"]]),
            ("Device parallelism", [*study_notes["parallelism"], *study_tables["parallelism"],
                                    *study_plots["parallelism"]]),
            ("Runtime split", [*study_tables["split"], *study_plots["split"]]),
            ("Node scaling", [*study_tables["scaling"], *study_plots["scaling"]]),
            ("Figures", [p for p in parts.plots if p not in roof_plots and p not in studied]
             + [f"Not drawn: {s}." for s in parts.skipped if s not in roof_skipped]),
            ("Roofline and hardware correlation", [*roof_notes, *roof_tables, *roof_plots,
                                                   *[f"Not drawn: {s}." for s in roof_skipped]]),
            ("Statistics", present(named["statistics"])),
            ("Origins and verification", present(named["origins"], named["sites"])),
            ("Runs not included", present(named["excluded"])),
            ("Sweeps", present(named["sweeps"])),
            ("All runs", [named["runs"]])]


def _write_pages(out: Path, title: str, meta: list[str], sections: list) -> tuple[Path, Path]:
    """report.md and report.html."""
    from hpcai.launcher.report import html, outputs, tables
    from hpcai.launcher.report.readable import for_pages

    from hpcai.launcher.report.safe_text import md_text

    sections = for_pages(sections)  # long tables: the first rows, the rest in the CSV
    # Names from results (workloads, sites, devices) are text, never markup: escaped.
    md = [f"# {md_text(title)}", "", *[f"{m.markdown() if isinstance(m, html.Linked) else md_text(m)}  "
                                       for m in meta], ""]
    for heading, items in sections:
        if not items:
            continue
        md += [f"## {heading}", ""]
        for item in items:
            if isinstance(item, tables.Table):
                md.append(outputs.table_markdown(item))
            elif isinstance(item, str):
                md += [md_text(item), ""]
            else:
                md += [f"![{md_text(item.title)}](plots/{item.png.name})", "",
                       f"*{md_text(item.title)}.* {md_text(item.caption)} ([SVG](plots/{item.svg.name}))", ""]
    from hpcai.safe_files import Folder

    # Text read from results may hold what UTF-8 cannot (lone surrogates): escaped, never
    # fatal. Never through a planted link (hpcai/safe_files.py).
    with Folder.open(out) as folder:
        md_path = folder.write_text("report.md", "\n".join(md))
        html_path = folder.write_text("report.html", html.page(title, meta, sections))
    return md_path, html_path


def _write_csvs(parts: _Parts, tables: list | None = None) -> dict[str, Path]:
    """One CSV per table made here (default: every one so far), by key (the figures'
    worker writes the cells' CSV and the tables it made)."""
    from hpcai.launcher.report import outputs

    return {t.key: outputs.write_table_csv(t, parts.out)
            for t in (_all_tables(parts) if tables is None else tables)}


def _write_json(parts: _Parts, opts: ReportOptions, paths: list) -> Path:
    """report.json: every table, cell and best cap, with the options that made them."""
    from hpcai.launcher.report import outputs
    from hpcai.launcher.report.load import shown_path
    from hpcai.launcher.report.long_tables import all_texts

    out, work, runs = parts.out, parts.work, parts.runs
    return outputs.write_json({
        "kind": "hpcai.report", "report_version": 1, "generated": parts.generated,
        "title": opts.title, "inputs": [shown_path(p) for p in paths],
        "options": {"node_overhead_w": opts.node_overhead_w, "max_slowdown": opts.max_slowdown,
                    "work": work, "noisy_cv": opts.noisy_cv, "reference": opts.reference,
                    "combine_runs": opts.combine_runs, "objective": opts.objective,
                    "facility": {"energy_price": opts.energy_price, "pue": opts.pue,
                                 "carbon_intensity": opts.carbon_intensity, "currency": opts.currency},
                    "mix": None if opts.mix is None else str(opts.mix),
                    "prices": None if opts.prices is None else str(opts.prices)},
        "facility_note": parts.facility_note,
        "plan": ({"headline": parts.plan["headline"],
                  **{k: str(p.relative_to(out)) for k, p in parts.plan["paths"].items()}}
                 if parts.plan else None),
        "node_overhead": parts.overhead,
        "cells": parts.json_parts["cells"],
        "best_caps": parts.json_parts["best_caps"],
        "excluded_runs": [{"run_id": r.run_id, "status": r.status, "problems": r.problems,
                           "failed_checks": r.failed_checks,
                           "path": shown_path(r.path)} for r in runs if not r.usable],
        "sweeps": [{"path": shown_path(s.path), "sweep_id": s.doc.get("sweep_id"),
                    "status": s.doc.get("status"), "counts": s.doc.get("counts"),
                    "idle_baseline": s.doc.get("idle_baseline")} for s in parts.sweeps],
        "tables": {t.key: {"title": t.title, "header": t.header,
                           "rows": parts.rows_parts[t.key] if t.key in parts.rows_parts
                           else all_texts(t), "notes": t.notes}
                   for t in parts.all_tables},
        "plots": [{"name": p.name, "png": str(p.png.relative_to(out)),
                   "svg": str(p.svg.relative_to(out))} for p in parts.plots],
        "plots_not_drawn": parts.skipped,
    }, out)


def overhead_note(runs, override: float | None) -> str:
    if override is not None:
        return (f"Node overhead in efficiency: {override:g} W per node (set with "
                "--node-overhead-w; the results stated "
                f"{_stated(runs)}).")
    measured = sum(1 for r in runs if r.usable and r.node_energy_j)
    if measured:  # Run.efficiency prefers measured node energy to the fixed overhead
        return (f"Node energy in efficiency: measured at the node for {measured} of "
                f"{sum(1 for r in runs if r.usable)} run(s); for the rest {_stated(runs)}, "
                "as stated in the results (--node-overhead-w replaces both).")
    return (f"Node overhead in efficiency: {_stated(runs)}, as stated in the results "
            "(change it with --node-overhead-w).")


def _stated(runs) -> str:
    values = sorted({r.node_overhead_w for r in runs if r.usable and r.node_overhead_w is not None})
    if not values:
        return "none stated"
    return " / ".join(f"{v:g} W" for v in values) + " per node"
