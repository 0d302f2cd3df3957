"""Issue 28: where results of several sites or signed bundles meet, every row of
the throughput and efficiency tables says whose runs its cells average and
whether they verified; a run of a failed bundle is in no cell. Results of one
site, all loose, keep the tables as they were (no Origin column)."""
from pathlib import Path

from hpcai.launcher.report import tables as T
from hpcai.launcher.report.efficiency import analyse
from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.origins import Origin, mark
from hpcai.launcher.report.outputs import write_table_csv
from hpcai.launcher.report.stats import aggregate
from report_docs import make_result, write_result


def _runs(tmp_path, docs):
    for doc in docs:
        write_result(tmp_path / "results", doc)
    runs, _ = read_runs([tmp_path / "results"])
    return runs


def _origin_by_gpu(table):
    column = table.header.index("Origin")
    return {row[1].text: row[column].text for row in table.rows}


def test_rows_name_their_site_and_verification_and_a_failed_bundle_is_in_no_cell(tmp_path):
    docs = [make_result(site="centre-a", cap_w=300.0, per_gpu=1000.0),
            make_result(site="centre-a", cap_w=400.0, per_gpu=1100.0),
            make_result(site="centre-b", cap_w=300.0, per_gpu=990.0, gpu="NVIDIA H200",
                        power_per_gpu_w=290.0),
            make_result(site="centre-b", cap_w=400.0, per_gpu=5000.0, gpu="NVIDIA H200",
                        power_per_gpu_w=390.0)]
    runs = _runs(tmp_path, docs)
    by_id = {r.run_id: r for r in runs}
    b300, b400 = (by_id[d["run_id"]] for d in docs[2:])
    # centre-b's two runs came in signed bundles: one verified, one tampered (failed).
    origins = {}
    for run, verdict in ((b300, "verified"), (b400, "failed")):
        origins[Path(run.path).resolve()] = Origin("centre-b", verdict, "throughput changed")
    mark(runs, origins)
    cells = aggregate(runs, None, 0.05)
    analyses = analyse(cells, 0.10)
    (table,) = T.throughput_tables(cells, analyses, None, runs)
    assert table.header[-1] == "Origin"
    got = _origin_by_gpu(table)
    h100 = next(k for k in got if k.startswith("H100"))
    h200 = next(k for k in got if k.startswith("H200"))
    assert got[h100] == "centre-a (unsigned)"
    assert got[h200] == "centre-b (verified)"  # the failed run is not behind any cell
    h200_row = next(row for row in table.rows if row[1].text == h200)
    assert "5000" not in " ".join(c.text for c in h200_row)  # the tampered figure
    assert any(n.startswith("Origin:") for n in table.notes)
    (eff,) = T.efficiency_tables(cells, analyses, "overhead", runs)
    assert _origin_by_gpu(eff) == got
    # The CSV: the origin once, without the noisy / cap-enforced flags of a cap column.
    header = write_table_csv(table, tmp_path).read_text().splitlines()[0].split(",")
    assert header[-1] == "Origin" and "Origin noisy" not in header


def test_a_row_mixing_a_verified_and_a_loose_run_says_both(tmp_path):
    docs = [make_result(site="centre-a", cap_w=300.0, per_gpu=1000.0),
            make_result(site="centre-a", cap_w=400.0, per_gpu=1100.0)]
    runs = _runs(tmp_path, docs)
    signed = next(r for r in runs if r.run_id == docs[0]["run_id"])
    mark(runs, {Path(signed.path).resolve(): Origin("centre-a", "verified", "")})
    cells = aggregate(runs, None, 0.05)
    (table,) = T.throughput_tables(cells, analyse(cells, 0.10), None, runs)
    assert list(_origin_by_gpu(table).values()) == ["centre-a (unsigned 1, verified 1)"]


def test_one_site_of_loose_results_keeps_the_tables_as_they_were(tmp_path):
    docs = [make_result(site="centre-a", cap_w=300.0, per_gpu=1000.0),
            make_result(site="centre-a", cap_w=400.0, per_gpu=1100.0)]
    runs = _runs(tmp_path, docs)
    mark(runs, {})
    cells = aggregate(runs, None, 0.05)
    analyses = analyse(cells, 0.10)
    (table,) = T.throughput_tables(cells, analyses, None, runs)
    (eff,) = T.efficiency_tables(cells, analyses, "overhead", runs)
    assert "Origin" not in table.header and "Origin" not in eff.header
    assert all(len(row) == len(table.header) for row in table.rows)
