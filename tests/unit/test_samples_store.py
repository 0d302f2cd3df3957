"""samples.csv read only for the power plot, then kept as zstd Parquet beside the
results index (launcher/report/samples_store.py). Real DuckDB, real files."""
import os
from pathlib import Path

import duckdb

from hpcai.launcher.bundles import files
from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report.plots import read_power_samples
from hpcai.launcher.report.samples_store import cache_folder, power_series
from hpcai.launcher.report.store import index
from hpcai.launcher.report.load import kit
from report_docs import make_result, write_result


def _run_with_samples(tmp_path):
    write_result(tmp_path / "results", make_result(run_id="with-samples", cap_w=500.0), samples=True)
    return next(r for r in index(kit(), [tmp_path / "results"]).runs if r.samples_path)


def test_samples_are_stored_as_zstd_parquet_and_read_back_equal(tmp_path, monkeypatch, results_index):
    run = _run_with_samples(tmp_path)
    assert not list(results_index.parent.glob("samples/*.parquet"))  # indexing alone reads none
    first = power_series(run)
    assert first == read_power_samples(run.samples_path) and first  # the CSV, parsed as before
    stored = list(cache_folder().glob("*.parquet"))
    assert len(stored) == 1
    codecs = duckdb.connect().execute("SELECT DISTINCT compression FROM parquet_metadata(?)",
                                      [str(stored[0])]).fetchall()
    assert codecs == [("ZSTD",)]

    def no_csv(*args, **kwargs):
        raise AssertionError("samples.csv read again")

    monkeypatch.setattr(files, "read_regular", no_csv)
    assert power_series(run) == first  # from the Parquet copy, number for number


def test_a_changed_samples_file_is_read_again(tmp_path, results_index):
    run = _run_with_samples(tmp_path)
    power_series(run)
    text = Path(run.samples_path).read_text().replace(",gpu0,", ",gpu7,")
    Path(run.samples_path).write_text(text)
    os.utime(run.samples_path, ns=(5, 5))
    assert "gpu7" in power_series(run) and len(list(cache_folder().glob("*.parquet"))) == 2


def test_the_report_draws_the_power_plot_from_the_stored_copy(tmp_path, monkeypatch, results_index):
    _run_with_samples(tmp_path)
    first = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "a"))
    assert any(p.name == "power-timeseries" for p in first["plots"])
    monkeypatch.setattr(files, "read_regular", lambda *a, **k: b"")  # the CSV as if empty
    again = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "b"))
    assert any(p.name == "power-timeseries" for p in again["plots"])
