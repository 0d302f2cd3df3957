"""One bad input never stops a report (issue 14 §5): each unreadable, invalid
or awkward file is listed with why and left out, the report is written from
the rest, and the exit status is non-zero only when nothing valid remains."""
import json
import os
from pathlib import Path

import pytest

from hpcai.errors import ResultError
from hpcai.launcher.report import ReportOptions, build_report, make_report
from hpcai.launcher.run.results import validation_errors
from report_docs import crafted_set, make_result, write_result


def test_the_result_schema_check_rejects_nan_and_infinity():
    doc = make_result(cap_w=300.0, per_gpu=1000.0)
    assert validation_errors(doc) == []
    doc["throughput"]["per_gpu"] = float("nan")
    doc["power"]["energy_j"] = float("inf")
    errors = validation_errors(doc)
    assert any("$.throughput.per_gpu" in e and "finite" in e for e in errors), errors
    assert any("$.power.energy_j" in e for e in errors), errors


def test_a_nan_throughput_is_listed_as_invalid_and_left_out(tmp_path):
    crafted_set(tmp_path / "results")
    doc = make_result(cap_w=600.0, per_gpu=512.125)
    doc["run_id"] = "nan-run"
    path = write_result(tmp_path / "results", doc)
    path.write_text(path.read_text().replace("512.125", "NaN"))
    written = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    excluded = {r["run_id"]: r for r in report["excluded_runs"]}
    assert excluded["nan-run"]["status"] == "invalid"
    assert "not a finite number" in excluded["nan-run"]["problems"][0]
    assert all("nan-run" not in c["run_ids"] for c in report["cells"])
    assert written["usable"] == 7  # the crafted set's complete runs, all still reported
    assert any("nan-run" in line and "finite" in line for line in written["excluded"])


def test_a_300_character_workload_name_gets_safe_plot_file_names(tmp_path):
    crafted_set(tmp_path / "results")
    doc = make_result(cap_w=600.0, workload="w" * 300)
    doc["run_id"] = "long-name"
    write_result(tmp_path / "results", doc)
    written = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
    long_plots = [p for p in written["plots"] if p.name.startswith("throughput-w")]
    assert len(long_plots) == 1 and long_plots[0].png.is_file()
    assert all(len(p.png.name) < 100 for p in written["plots"])
    assert written["usable"] == 8


def test_results_under_a_path_that_is_not_utf8_are_read_and_shown_escaped(tmp_path):
    crafted_set(tmp_path / "results")
    odd = Path(os.fsdecode(os.fsencode(tmp_path / "results") + b"/site-\xff"))
    doc = make_result(cap_w=600.0)
    doc["run_id"] = "odd-path"
    write_result(odd, doc)
    (odd / "broken").mkdir()
    (odd / "broken" / "result.json").write_bytes(b'{"status": "compl\xffete"')
    written = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
    html = written["html"].read_text(encoding="utf-8")
    assert "site-\\xff/broken/result.json" in html  # listed, with its path readable
    assert written["usable"] == 8  # the odd folder's valid run counts
    rows = [r for r in json.loads((tmp_path / "out" / "report.json").read_text())["excluded_runs"]
            if "broken" in r["path"]]
    assert rows and rows[0]["status"] == "unreadable"


def test_only_unreadable_input_writes_the_report_then_fails(tmp_path, capsys):
    (tmp_path / "results" / "x").mkdir(parents=True)
    (tmp_path / "results" / "x" / "result.json").write_text("{not json")
    with pytest.raises(ResultError) as err:
        build_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
    assert err.value.exit_code != 0
    assert "no complete, valid result among the 1 file(s)" in err.value.one_line()
    html = (tmp_path / "out" / "report.html").read_text()
    assert "not readable JSON" in html
    # Its cap is unknown, not "uncapped" (issue 14 §6).
    excluded = json.loads((tmp_path / "out" / "report.json").read_text())["tables"]["excluded-runs"]
    assert excluded["rows"][0][3] == "?"
    assert "not included:" in capsys.readouterr().out


def test_one_valid_result_beside_a_bad_one_exits_zero(tmp_path):
    write_result(tmp_path / "results", make_result(cap_w=300.0))
    (tmp_path / "results" / "x").mkdir()
    (tmp_path / "results" / "x" / "result.json").write_text("[]")
    assert build_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out")) == 0


def test_the_cli_reports_from_and_into_folders_whose_names_are_not_utf8(cpu_node, tmp_path):
    inputs = os.fsencode(tmp_path) + b"/results-\xfe"
    write_result(Path(os.fsdecode(inputs)), make_result(cap_w=300.0))
    out = os.fsencode(tmp_path) + b"/report-\xff"
    cpu_node.env["PYTHONIOENCODING"] = "utf-8"  # strict, as a UTF-8 terminal is
    done = cpu_node.launch("report", inputs, "-o", out)
    assert done.returncode == 0, done.stderr
    assert "report-\\xff" in done.stdout and "Traceback" not in done.stderr
    assert (Path(os.fsdecode(out)) / "report.html").is_file()
