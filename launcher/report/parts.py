"""What a report is given (ReportOptions), what it is made of (_Parts) and how it
reads its results (load_results): apart from report/__init__.py, so the planner
(launcher/planner) loads results as the report does without importing the report,
which imports the planner for `report --mix`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hpcai.errors import UsageError


@dataclass
class ReportOptions:
    output: str | Path = "report"
    node_overhead_w: float | None = None  # None: each result's stated overhead
    max_slowdown: float = 0.10
    work: float | None = None  # None: DEFAULT_WORK per unit
    noisy_cv: float = 0.05
    reference: bool = False
    reference_file: str | Path | None = None
    power_run: str | None = None
    title: str = "hpcai report"
    combine_runs: bool = False  # independent runs of one configuration as repeats
    objective: str = "energy"  # energy | cost | co2 | edp: what picks the recommended cap
    # Given at report time over each result's recorded site [facility] (facility.override_facility)
    energy_price: float | None = None  # price_per_kwh
    pue: float | None = None
    carbon_intensity: float | None = None  # carbon_g_per_kwh
    currency: str | None = None
    mix: str | Path | None = None  # the plan for this job mix under plan/ (report/plan_screen.py)
    prices: str | Path | None = None  # the plan's prices file (with mix)


@dataclass
class _Parts:
    """What one report is made of, gathered step by step by make_report."""

    runs: list
    sweeps: list
    reference: object
    out: Path
    cells: list = field(default_factory=list)
    analyses: list = field(default_factory=list)
    work: dict = field(default_factory=dict)
    overhead: str = ""
    objective_note: str = ""
    facility_note: str = ""  # --energy-price etc. over what the results recorded
    plan: dict = field(default_factory=dict)  # --mix: the plan written (paths, headline)
    named: dict = field(default_factory=dict)  # the tables by role
    all_tables: list = field(default_factory=list)
    plots: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    roof: tuple = ((), (), (), ())  # tables, plots, skipped, notes
    roof_points: list = field(default_factory=list)  # what the roofline plots draw
    study: tuple = ({}, {}, {})  # tables, plots, notes by section key
    study_drawing: tuple = ()  # what the studies' plots draw (scaling.draw)
    power_run: object = None  # the run whose power samples are drawn
    generated: str = ""
    usable: int = 0
    cells_csv: Path | None = None  # written by the figures' worker, as the JSON parts
    json_parts: dict = field(default_factory=dict)  # report.json's key -> json_stream.Part
    # CELL_TABLES made by the figures' worker: table key -> CSV path, and table key ->
    # its rows' json_stream.Part.
    worker_csvs: dict = field(default_factory=dict)
    rows_parts: dict = field(default_factory=dict)


def load_results(paths: list, opts: ReportOptions) -> _Parts:
    """The results under paths as the report reads them (folders, the results store,
    bundles pulled and verified, the paper's rows with opts.reference), their origins
    marked, and opts.output made (never through a link): the parts a report, or the
    planner (launcher/planner), makes cells and analyses of. Nothing is analysed yet."""
    from hpcai.launcher.report import origins
    from hpcai.launcher.report.load import load_indexed, load_reference

    if origins.pulled(paths):  # bundles pulled or unpacked, and verified, first
        paths, where = origins.pull_and_verify(paths)
        indexed = load_indexed(paths, allow_empty=opts.reference)
    else:  # local folders walked once: for their results and their bundles
        indexed = load_indexed(paths, allow_empty=opts.reference)
        where = origins.verified(indexed.found.envelopes)
    runs, sweeps = indexed.runs, indexed.sweeps
    origins.mark(runs, where)
    reference = load_reference(opts.reference_file) if opts.reference else None
    if opts.power_run and all(r.run_id != opts.power_run for r in runs):
        raise UsageError(f"--power-run {opts.power_run!r} is not among the results read",
                         "give a run id from the report's runs table")
    out = Path(opts.output)
    try:
        from hpcai.safe_files import Folder

        Folder.open(out, create=True).close()  # never a link: nothing is written through one
    except OSError as exc:
        raise UsageError(f"cannot create report folder {out} ({exc.strerror}"
                         f"{'; it is a symbolic link' if out.is_symlink() else ''})",
                         "choose another with --output (give the real folder, not a link)") from None
    return _Parts(runs, sweeps, reference, out)
