"""The results index keeps each Run field in a column of its own
(launcher/report/run_columns.py): a Run read back from the index must equal,
field by field, the Run read from its file, including values a typed column
cannot hold (text that is not UTF-8, NaN); lists are DuckDB lists.
Real DuckDB, real files; no fakes."""
import dataclasses
import json
import os
from pathlib import Path

import duckdb

from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report import run_columns, store
from hpcai.launcher.report.ingest import ingest
from hpcai.launcher.report.load import Run, kit
from hpcai.launcher.report.store import index
from report_docs import crafted_set, make_result, write_result


def _fields(run) -> dict:
    return {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}


def _same(a, b) -> bool:
    """Equal, with NaN equal to NaN and an int never equal to a float (exact types)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _odd_run(tmp_path) -> Run:
    path = tmp_path / os.fsdecode(b"caf\xe9") / "result.json"
    run = Run(os.fspath(path), "id-\udcff", "complete", ["a problem"], workload="w\x00", cap_w=300,
              processes=2 ** 70, enforced=1, per_gpu=float("nan"), node=float("inf"),
              power_doc={"energy_j": float("nan"), "cap": {"binds": True}},
              point={"batch": 64}, input=None, samples_path=os.fspath(path.parent / "samples.csv"),
              per_epoch_per_gpu=[1.5, 2], facility={"pue": 1.2}, started="2026-01-01T00:00:00")
    run.content_hash = "ab" * 32
    return run


def test_a_run_with_values_no_typed_column_holds_comes_back_exactly(tmp_path):
    fields = run_columns.layout(Run)
    con = duckdb.connect(":memory:")
    table = {"path": "VARCHAR", **run_columns.columns(Run)}  # the key column holds the path
    con.execute("CREATE TABLE files (" + ", ".join(f'"{n}" {t}' for n, t in table.items()) + ")")
    plain, odd = Run(os.fspath(tmp_path / "result.json"), "plain", "complete"), _odd_run(tmp_path)

    def encoded(run):
        key = store._key(run.path)  # as the index keys it: a path that is not UTF-8, as shown
        return {"path": key, **run_columns.encode(run, fields, key)}

    rows = tmp_path / "rows.ndjson"
    rows.write_text("".join(json.dumps(encoded(r), allow_nan=False) + "\n" for r in (plain, odd)))
    spec = ", ".join(f"'{n}': '{t}'" for n, t in table.items())
    con.execute(f"INSERT INTO files SELECT * FROM read_json(?, format='newline_delimited', "
                f"columns={{{spec}}})", [str(rows)])
    decoder = run_columns.Decoder(Run, fields)
    # Read back as the report reads the index: a column at a time (NULLs masked).
    (columns,) = store.column_batches(con, run_columns.select_list(fields))
    back = decoder.runs(columns)
    for original, read in zip((plain, odd), back):
        for name, value in _fields(original).items():
            assert _same(getattr(read, name), value), name
    # The ones a typed column could not hold went through the row's extra object.
    extra = json.loads(encoded(odd)[run_columns.EXTRA])
    assert {"path", "run_id", "workload", "cap_w", "processes", "enforced", "per_gpu",
            "node"} <= extra.keys()
    assert encoded(plain)[run_columns.EXTRA] is None


def test_lists_are_never_shared_between_runs(tmp_path):
    """`problems` grows after loading (origins.mark): runs with equal lists get their own."""
    crafted_set(tmp_path / "results")
    runs = index(kit(), [tmp_path / "results"]).runs  # cold, then read back from the index
    runs = index(kit(), [tmp_path / "results"]).runs  # warm
    lists = [id(getattr(r, name)) for r in runs for name in ("problems", "failed_checks",
                                                             "comparability_reasons")]
    assert len(lists) == len(set(lists))


def test_the_index_gives_the_runs_read_from_the_files(tmp_path, results_index):
    crafted_set(tmp_path / "results")
    write_result(tmp_path / "results", make_result(run_id="with-samples", cap_w=500.0), samples=True)
    odd = make_result(run_id="id-\udcff", cap_w=300)  # an int cap, text that is not UTF-8
    write_result(tmp_path / "results", odd)
    (tmp_path / "results" / "broken").mkdir()
    (tmp_path / "results" / "broken" / "result.json").write_text('{"kind": ')
    direct = {r.path: r for r in (ingest(kit(), p) for p in
                                  sorted((tmp_path / "results").rglob("result.json")))}
    cold = index(kit(), [tmp_path / "results"])
    warm = index(kit(), [tmp_path / "results"])
    assert (cold.read, warm.read, warm.reused) == (len(direct), 0, len(direct))
    assert any(r.samples_path for r in warm.runs)
    # The int cap is read as the float Run declares: in its DOUBLE column, not the exceptions.
    [odd_run] = [r for r in warm.runs if r.run_id.startswith("id-")]
    assert type(odd_run.cap_w) is float and odd_run.cap_w == 300.0
    with duckdb.connect(str(results_index), read_only=True) as con:
        [(cap, extra)] = con.execute("SELECT cap_w, extra_json FROM files "
                                     "WHERE run_id LIKE 'id-%'").fetchall()
    assert cap == 300.0 and '"cap_w"' not in extra  # its path (not UTF-8) is the exception
    for runs in (cold.runs, warm.runs):
        assert sorted(r.path for r in runs) == sorted(direct)
        for run in runs:
            for name, value in _fields(direct[run.path]).items():
                assert _same(getattr(run, name), value), (run.run_id, name)
    assert [r.path for r in warm.runs] == [r.path for r in cold.runs]  # the walk's order


def test_a_warm_index_with_a_changed_and_a_new_file_gives_the_files_runs(tmp_path, results_index):
    # Stored runs are decoded while the folders are walked (in a forked child); the
    # changed and new files' rows come from the index once written, in the walk's order.
    crafted_set(tmp_path / "results")
    odd_folder = tmp_path / "results" / os.fsdecode(b"caf\xe9")  # a name that is not UTF-8
    write_result(odd_folder, make_result(run_id="odd-folder", cap_w=400.0))
    cold = index(kit(), [tmp_path / "results"])
    changed = Path(next(r.path for r in cold.runs if r.run_id != "odd-folder" and r.per_gpu))
    doc = json.loads(changed.read_text())
    doc["throughput"]["per_gpu"] = 1.25
    changed.write_text(json.dumps(doc))
    os.utime(changed, ns=(3, 3))
    write_result(odd_folder, make_result(run_id="new-one", cap_w=500.0))
    warm = index(kit(), [tmp_path / "results"])
    assert warm.read == 2 and warm.reused == len(cold.runs) - 1
    assert next(r for r in warm.runs if r.path == os.fspath(changed)).per_gpu == 1.25
    direct = {os.fspath(p): ingest(kit(), p) for p in (tmp_path / "results").rglob("result.json")}
    assert sorted(r.path for r in warm.runs) == sorted(direct)
    for run in warm.runs:
        for name, value in _fields(direct[run.path]).items():
            assert _same(getattr(run, name), value), (run.run_id, name)
    assert [r.path for r in warm.runs if r.run_id != "new-one"] == [r.path for r in cold.runs]


def test_deleting_the_index_gives_the_same_report(tmp_path, results_index):
    crafted_set(tmp_path / "results")

    def report(name):
        make_report([tmp_path / "results"], ReportOptions(output=tmp_path / name))
        doc = json.loads((tmp_path / name / "report.json").read_text())
        doc.pop("generated")
        return doc, (tmp_path / name / "report.md").read_text().split("\n", 3)[3]

    cold = report("cold")
    warm = report("warm")
    results_index.unlink()
    again = report("again")
    assert cold == warm == again
    assert cold[0]["cells"]  # a report with figures, not an empty one


def test_lists_are_duckdb_lists_a_user_can_query(tmp_path, results_index):
    crafted_set(tmp_path / "results")
    runs = index(kit(), [tmp_path / "results"]).runs
    with duckdb.connect(str(results_index), read_only=True) as con:
        types = con.execute("SELECT DISTINCT typeof(per_epoch_per_gpu), typeof(problems) "
                            "FROM files WHERE per_epoch_per_gpu IS NOT NULL").fetchall()
        means = dict(con.execute("SELECT run_id, list_avg(per_epoch_per_gpu) FROM files "
                                 "WHERE len(per_epoch_per_gpu) > 0").fetchall())
    assert types == [("DOUBLE[]", "VARCHAR[]")]
    measured = {r.run_id: sum(r.per_epoch_per_gpu) / len(r.per_epoch_per_gpu) for r in runs
                if r.per_epoch_per_gpu}
    assert measured and means.keys() == measured.keys()
    for run_id, mean in measured.items():
        assert abs(means[run_id] - mean) <= 1e-12 * abs(mean), run_id
