"""Tables with a row per run or per cell (report/long_tables.py): made column by
column; only the first page's rows are cells, the rest are written from the
columns into runs.csv, origins.csv, excluded-runs.csv, statistics.csv,
fixed-work.csv (the last two by the figures' worker) and report.json. Those files
are the same bytes whether a row was a cell or written from the columns: one
report with every row a cell (a page longer than the set) against one with a
page of 2 rows."""
from __future__ import annotations

import json

import pytest

from hpcai.launcher.report import ReportOptions, make_report, readable
from hpcai.launcher.report import tables as T
from hpcai.launcher.report.load import read_runs
from report_docs import crafted_set, make_result, write_result

LONG = ("runs.csv", "origins.csv", "excluded-runs.csv", "statistics.csv", "fixed-work.csv")


def _hostile_set(folder):
    """crafted_set (a failed run, a second site), plus a formula, markup, a clock cap,
    a run that is not valid and text with quotes and line breaks."""
    crafted_set(folder)
    odd = make_result(workload="=HYPERLINK(\"http://x\",\"a,b\")", site="-elsewhere", cap_w=300.0)
    odd["spec"]["power"]["clocks"] = {"sm_mhz": 1005, "mem_mhz": None}
    write_result(folder, odd)
    write_result(folder, make_result(workload="a\nb <i>", site="+x|y", status="interrupted"))
    write_result(folder, make_result(site="@here", cap_w=None, per_gpu=1234.5678901234))


def _report(results, out, page_rows, monkeypatch):
    monkeypatch.setattr(readable, "PAGE_ROWS", page_rows)
    make_report([results], ReportOptions(output=out))
    doc = json.loads((out / "report.json").read_text())
    return {name: (out / name).read_bytes() for name in LONG}, doc["tables"]


def test_rows_written_from_columns_equal_rows_made_as_cells(tmp_path, monkeypatch):
    _hostile_set(tmp_path / "results")
    cells, cells_json = _report(tmp_path / "results", tmp_path / "cells", 10_000, monkeypatch)
    streamed, streamed_json = _report(tmp_path / "results", tmp_path / "streamed", 2,
                                      monkeypatch)
    assert cells == streamed
    assert cells_json == streamed_json
    assert b"'=HYPERLINK" in streamed["runs.csv"]  # neutralised in the rows written from columns
    assert len(cells_json["runs"]["rows"]) == 11 and len(cells_json["origins"]["rows"]) == 11
    md = (tmp_path / "streamed" / "report.md").read_text()
    assert "… and 9 more rows: every row is in runs.csv" in md
    cells_count = len(cells_json["statistics"]["rows"])
    assert f"… and {cells_count - 2} more rows: every row is in statistics.csv" in md
    # The first page keeps its marks: bold (least energy × time), noisy.
    full = (tmp_path / "cells" / "report.md").read_text()
    for title in ("### Energy and time for a fixed amount of work", "### Statistics per cell"):
        assert _first_rows(md, title, 2) == _first_rows(full, title, 2)
    assert "**" in "".join(_first_rows(full, "### Energy and time for a fixed amount of work",
                                       cells_count))


def _first_rows(md: str, title: str, count: int) -> list[str]:
    lines = md[md.index(title):].splitlines()
    return lines[4:4 + count]  # after the title, a blank line, the header and its rule


@pytest.mark.parametrize("page_rows", [2, 10_000])
def test_only_the_first_page_of_the_runs_table_is_cells(tmp_path, monkeypatch, page_rows):
    _hostile_set(tmp_path / "results")
    monkeypatch.setattr(readable, "PAGE_ROWS", page_rows)
    runs, _ = read_runs([tmp_path / "results"])
    table = T.runs_table(runs)
    assert len(table.rows) == min(page_rows, len(runs))
    assert (table.more is None) == (page_rows >= len(runs))
    if table.more is not None:
        assert len(table.more) == len(runs) - page_rows
        assert len(table.more.columns) == len(table.header)
        assert all(len(texts) == len(runs) - page_rows for texts, _ in table.more.columns)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_report_leaves_the_garbage_collector_as_it_found_it(tmp_path, enabled):
    """make_report turns the collector off while it makes cells and tables (no cycles)
    and on while matplotlib draws: after it, the caller's setting and nothing frozen."""
    import gc

    crafted_set(tmp_path / "results")
    (gc.enable if enabled else gc.disable)()
    try:
        make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("page_rows", [2, 10_000])
def test_the_cells_tables_are_the_same_whichever_process_makes_them(tmp_path, monkeypatch,
                                                                    page_rows):
    """The statistics and fixed-work tables are made by the figures' worker when it is
    free first (plots kept), else by the report's process (report/forked.py Claim):
    each forced in turn, the files and pages are the same."""
    import os

    import hpcai.launcher.report as report
    from hpcai.launcher.report import forked

    _hostile_set(tmp_path / "results")
    monkeypatch.setattr(readable, "PAGE_ROWS", page_rows)
    take, report_pid = forked.Claim.take, os.getpid()
    tabulate_here, made_here = report._tabulate_cells, []
    monkeypatch.setattr(report, "_tabulate_cells",
                        lambda parts: made_here.append(1) or tabulate_here(parts))
    made = {}
    for side in ("report", "worker"):
        def only(claim, side=side):
            here = "report" if os.getpid() == report_pid else "worker"
            return here == side and take(claim)

        monkeypatch.setattr(forked.Claim, "take", only)
        out = tmp_path / side
        made_here.clear()
        make_report([tmp_path / "results"], ReportOptions(output=out))
        assert len(made_here) == (side == "report")  # the worker's: none made here
        doc = json.loads((out / "report.json").read_text())
        made[side] = ({name: (out / name).read_bytes() for name in ("statistics.csv",
                                                                    "fixed-work.csv")},
                      doc["tables"], (out / "report.md").read_text().splitlines()[3:])
    assert made["report"] == made["worker"]
    assert list(made["report"][1]).index("statistics") > list(made["report"][1]).index("fixed-work")
