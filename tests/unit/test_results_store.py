"""The results store (launcher/report/store.py, ingest.py): hostile and broken
inputs, each run counted once, incremental re-indexing, a disposable index, and
`hpcai-launch results ls|show|export`. Real DuckDB, real files; no fakes."""
import csv
import hashlib
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from hpcai.launcher.cli.hpcai_launch import main
from hpcai.launcher.report import ReportOptions, make_report, readable
from hpcai.launcher.report import ingest as ingest_module
from hpcai.launcher.report.load import kit, read_runs
from hpcai.launcher.report.store import index
from report_docs import crafted_set, make_result, write_result


def _report(tmp_path, *inputs):
    written = make_report(list(inputs), ReportOptions(output=tmp_path / "out"))
    return written, json.loads((tmp_path / "out" / "report.json").read_text())


def _excluded(report) -> dict:
    return {os.path.basename(os.path.dirname(r["path"])): r for r in report["excluded_runs"]}


HOSTILE = {
    "not-json": (b"{this is not json", "not readable JSON"),
    "not-utf8": (b'{"kind": "\xff\xfe"}', "not UTF-8"),
    "too-deep": (b"[" * 200_000 + b"]" * 200_000, "nested too deep"),
    "duplicate-keys": (b'{"kind": "hpcai.result", "kind": "other"}', "key 'kind' appears twice"),
    "not-an-object": (b"[1, 2, 3]", "not a JSON object"),
    "wrong-schema": (b'{"kind": "hpcai.result", "status": "complete"}', "does not match the result schema"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_result_is_listed_with_one_reason_and_the_rest_is_reported(tmp_path, name):
    crafted_set(tmp_path / "results")
    data, reason = HOSTILE[name]
    (tmp_path / "results" / name).mkdir()
    (tmp_path / "results" / name / "result.json").write_bytes(data)
    written, report = _report(tmp_path, tmp_path / "results")
    bad = _excluded(report)[name]
    assert len(bad["problems"]) == 1 and reason in bad["problems"][0], bad
    assert written["usable"] == 7  # the crafted set's complete runs, all still reported


def test_a_result_with_numbers_and_objects_for_names_is_listed_and_the_rest_reported(tmp_path):
    """Names of the wrong JSON type (a schema-invalid result): listed as their JSON
    text under "not included"; the report, its pages included, is still made."""
    crafted_set(tmp_path / "results")
    odd = make_result(run_id="odd-types")
    odd["spec"]["preset"], odd["spec"]["site"] = 5, {"name": ["a", 1]}
    odd["host"] = {"node": {"x": 1}}
    odd["gpus"][0]["name"] = 80
    write_result(tmp_path / "results", odd)
    written, report = _report(tmp_path, tmp_path / "results")
    bad = next(r for r in report["excluded_runs"] if r["run_id"] == "odd-types")
    assert "does not match the result schema" in bad["problems"][0]
    row = next(r for r in report["tables"]["runs"]["rows"] if r[0] == "odd-types")
    assert row[2:5] == ["5", "80 + NVIDIA H100 80GB HBM3", '["a", 1]']
    assert written["usable"] == 7 and "odd-types" in (tmp_path / "out" / "report.md").read_text()


def test_a_nan_and_a_huge_result_are_listed_not_read_or_averaged(tmp_path, monkeypatch):
    crafted_set(tmp_path / "results")
    nan = make_result(cap_w=600.0, per_gpu=512.125, run_id="nan-run")
    write_result(tmp_path / "results", nan).write_text(
        json.dumps(nan).replace("512.125", "NaN"))
    # The size limit made small so a "huge" file stays quick to write; the check is the same.
    monkeypatch.setattr(ingest_module, "MAX_BYTES", 64 * 1024)
    huge = make_result(cap_w=700.0, run_id="huge-run")
    huge["notes"] = "x" * 100_000
    write_result(tmp_path / "results", huge)
    written, report = _report(tmp_path, tmp_path / "results")
    excluded = _excluded(report)
    assert "not a finite number" in excluded["nan-run"]["problems"][0]
    assert "larger than the 65,536 bytes a result may be: not read" in excluded["huge-run"]["problems"][0]
    assert all("nan-run" not in c["run_ids"] and "huge-run" not in c["run_ids"] for c in report["cells"])
    assert written["usable"] == 7


def test_a_symlinked_result_is_listed_and_not_followed(tmp_path):
    crafted_set(tmp_path / "results")
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps(make_result(cap_w=650.0, run_id="elsewhere")))
    (tmp_path / "results" / "link").mkdir()
    (tmp_path / "results" / "link" / "result.json").symlink_to(secret)
    (tmp_path / "results" / "dirlink").symlink_to(tmp_path / "results" / "link", target_is_directory=True)
    written, report = _report(tmp_path, tmp_path / "results")
    links = [r for r in report["excluded_runs"] if any("symbolic link" in p for p in r["problems"])]
    assert len(links) == 1  # the linked folder is not walked, so the link is listed once
    assert all("elsewhere" not in c["run_ids"] for c in report["cells"])


def test_check_gives_one_line_for_a_result_nested_too_deep(tmp_path):
    path = tmp_path / "result.json"
    path.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    done = CliRunner().invoke(main, ["check", str(path)])
    assert done.exit_code != 0
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert "nested too deep" in lines[0] and "Traceback" not in done.output, done.output


def test_a_copied_run_folder_and_a_backup_are_counted_once(tmp_path):
    docs = crafted_set(tmp_path / "results")
    h100 = docs["h100-300a"]["run_id"]
    shutil.copytree(tmp_path / "results" / h100, tmp_path / "results" / f"{h100}-copy")
    shutil.copytree(tmp_path / "results", tmp_path / "results.bak")
    written, report = _report(tmp_path, tmp_path / "results", tmp_path / "results.bak")
    cell = next(c for c in report["cells"] if h100 in c["run_ids"])
    assert cell["repeats"] == 2 and cell["run_ids"].count(h100) == 1  # 300a and 300b, not 4 or 6
    assert written["usable"] == 7
    copies = [r for r in report["excluded_runs"] if r["status"] == "duplicate"]
    assert len(copies) == 8 + 1 + 1  # the backup's 9 files (a failed run too) and the copy
    assert all("a copy of" in r["problems"][0] for r in copies)
    # A result with the same run id but other content is another node's or another run's: kept.
    other = make_result(cap_w=300.0, per_gpu=1050.0, run_id=h100, repeat=2, sweep_id="sweep-a")
    write_result(tmp_path / "other", other)
    _, report = _report(tmp_path, tmp_path / "results", tmp_path / "other")
    assert next(c for c in report["cells"] if h100 in c["run_ids"])["repeats"] == 3


def test_the_report_and_results_ls_count_the_same_copy(tmp_path):
    """One rule (store.COPIES) for both: the first file by path of one run id and content."""
    docs = crafted_set(tmp_path / "results")
    h100 = docs["h100-300a"]["run_id"]
    for name in ("0-first", "zz-last"):
        shutil.copytree(tmp_path / "results" / h100, tmp_path / "results" / name)
    _, report = _report(tmp_path, tmp_path / "results")
    copies = sorted(r["path"] for r in report["excluded_runs"] if r["status"] == "duplicate")
    done = _cli("ls", tmp_path / "results", "--limit", "100")
    listed = sorted(line.split()[-1] for line in done.output.splitlines() if " copy " in line)
    assert copies == listed == sorted(str(tmp_path / "results" / d / "result.json") for d in (h100, "zz-last"))


def _counting_parses(monkeypatch) -> list:
    seen = []
    real = ingest_module.parse

    def counted(data):
        seen.append(len(data))
        return real(data)

    monkeypatch.setattr(ingest_module, "parse", counted)
    return seen


def test_indexing_is_incremental_and_the_index_can_be_deleted(tmp_path, monkeypatch, results_index):
    docs = crafted_set(tmp_path / "results")
    parses = _counting_parses(monkeypatch)
    first = index(kit(), [tmp_path / "results"])
    assert (first.read, first.reused, len(parses)) == (8, 0, 8)
    again = index(kit(), [tmp_path / "results"])
    assert (again.read, again.reused, len(parses)) == (0, 8, 8)  # nothing re-read
    assert [r.usable for r in again.runs] == [r.usable for r in first.runs]
    # Changed content: that file alone is read again, and its new figure is used.
    changed = tmp_path / "results" / docs["h100-400"]["run_id"] / "result.json"
    changed.write_text(changed.read_text().replace('"per_gpu": 1150.0', '"per_gpu": 1160.0'))
    os.utime(changed, ns=(1, 1))  # a new mtime whatever the clock's resolution
    new = make_result(cap_w=600.0, run_id="new-run")
    write_result(tmp_path / "results", new)
    shutil.rmtree(tmp_path / "results" / docs["h100-200"]["run_id"])
    third = index(kit(), [tmp_path / "results"])
    assert (third.read, third.reused, len(parses)) == (2, 6, 10)
    by_id = {r.run_id: r for r in third.runs}
    assert by_id[docs["h100-400"]["run_id"]].per_gpu == 1160.0 and "new-run" in by_id
    assert docs["h100-200"]["run_id"] not in by_id
    # Touched but unchanged: read and hashed, not parsed again.
    os.utime(changed, ns=(2, 2))
    fourth = index(kit(), [tmp_path / "results"])
    assert (fourth.read, len(parses)) == (1, 10)
    # The index is a cache: deleted, the next report reads every file again, same runs.
    results_index.unlink()
    fifth = index(kit(), [tmp_path / "results"])
    assert fifth.read == 8 and sorted(r.run_id for r in fifth.runs) == sorted(by_id)


def test_an_index_that_is_a_symlink_is_not_used(tmp_path, monkeypatch):
    crafted_set(tmp_path / "results")
    target = tmp_path / "not-mine.duckdb"
    target.write_bytes(b"precious")
    link = tmp_path / "index.duckdb"
    link.symlink_to(target)
    monkeypatch.setenv("HPCAI_RESULTS_INDEX", str(link))
    found = index(kit(), [tmp_path / "results"])
    assert "results index not used" in found.note and found.read == 8
    assert target.read_bytes() == b"precious"


def test_an_index_others_can_write_is_rebuilt_and_in_such_a_folder_not_used(tmp_path, results_index):
    docs = crafted_set(tmp_path / "results")
    assert index(kit(), [tmp_path / "results"]).read == 8
    import duckdb

    with duckdb.connect(str(results_index)) as con:  # someone else's numbers, planted
        con.execute("UPDATE files SET per_gpu = 9999.0")
    results_index.chmod(0o666)
    again = index(kit(), [tmp_path / "results"])
    assert again.note == "" and again.read == 8  # not trusted: built again from the files
    assert os.stat(results_index).st_mode & 0o022 == 0
    ids = {d["run_id"]: d["throughput"]["per_gpu"] for d in docs.values()}
    assert all(r.per_gpu == ids[r.run_id] for r in again.runs if r.run_id in ids)
    results_index.parent.chmod(0o777)
    shared = index(kit(), [tmp_path / "results"])
    assert "can be written by other users" in shared.note and shared.read == 8


def test_a_result_edited_in_place_with_size_mtime_and_inode_kept_is_read_again(tmp_path):
    docs = crafted_set(tmp_path / "results")
    assert index(kit(), [tmp_path / "results"]).read == 8
    changed = tmp_path / "results" / docs["h100-400"]["run_id"] / "result.json"
    before = changed.stat()
    text = changed.read_text()
    assert '"per_gpu": 1150.0' in text
    with open(changed, "r+") as fh:  # the same length, the same inode
        fh.write(text.replace('"per_gpu": 1150.0', '"per_gpu": 3450.0'))
    os.utime(changed, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = changed.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    again = index(kit(), [tmp_path / "results"])
    assert again.read == 1
    assert {r.run_id: r.per_gpu for r in again.runs}[docs["h100-400"]["run_id"]] == 3450.0


def test_a_hand_edited_unsigned_result_is_counted_by_no_consumer(tmp_path):
    """One rule (bundles/recompute.py): `report` and `results ls` recompute
    figures_consistency and samples_agreement, as `check` does, before counting a run."""
    honest = make_result(cap_w=300.0, run_id="honest")
    write_result(tmp_path / "results", honest, samples=True)
    edited = make_result(cap_w=300.0, run_id="edited")
    edited["throughput"]["per_gpu"] *= 3
    edited["throughput"]["node"] *= 3
    write_result(tmp_path / "results", edited, samples=True)
    drew_less = make_result(cap_w=300.0, run_id="drew-less")
    path = write_result(tmp_path / "results", drew_less, samples=True)
    drew_less["gpus"][0]["power_w"]["mean"] *= 0.5  # after the samples were written
    path.write_text(json.dumps(drew_less))
    _, report = _report(tmp_path, tmp_path / "results")
    excluded = _excluded(report)
    assert set(excluded) == {"edited", "drew-less"}
    assert excluded["edited"]["failed_checks"] == ["figures_consistency"]
    assert excluded["drew-less"]["failed_checks"] == ["samples_agreement"]
    listed = CliRunner().invoke(main, ["results", "ls", "--counted", str(tmp_path / "results")])
    assert listed.exit_code == 0, listed.output
    assert [line.split()[0] for line in listed.output.splitlines()[1:-1]] == ["honest"]


def test_control_characters_in_names_never_reach_the_terminal_report_md_or_csvs(cpu_node, tmp_path):
    """A folder (and a run id, a site) someone else named with a newline and escape
    codes: escaped at one place (hpcai/printable.py), never raw."""
    forged = "\n\x1b[2Jhpcai: VERIFIED\x1b[0m\u202e"
    doc = make_result(cap_w=300.0, run_id="run" + forged, site="site" + forged)
    doc["status"] = "failed"  # listed among the runs not included, with its path
    (tmp_path / "results").mkdir()
    write_result(tmp_path / "results", make_result(cap_w=300.0, run_id="plain"))
    folder = write_result(tmp_path / "results" / ("evil" + forged), doc).parent
    assert folder.exists()
    done = cpu_node.launch("report", str(tmp_path / "results"), "-o", str(tmp_path / "out"), timeout=300)
    assert done.returncode == 0, done.stderr
    listed = cpu_node.launch("results", "ls", str(tmp_path / "results"), timeout=300)
    assert listed.returncode == 0, listed.stderr
    written = [p.read_text() for p in (tmp_path / "out").iterdir() if p.suffix in (".md", ".csv")]
    for text in [done.stdout, done.stderr, listed.stdout, listed.stderr, *written]:
        assert "\x1b" not in text and "\u202e" not in text
        assert not any(line.startswith("hpcai: VERIFIED") for line in text.splitlines())
    assert "\\x0a\\x1b[2Jhpcai: VERIFIED" in listed.stdout
    assert any("\\x1b[2J" in text for text in written)


def test_a_broken_index_is_rebuilt(tmp_path, results_index):
    crafted_set(tmp_path / "results")
    results_index.write_bytes(b"this is no database")
    found = index(kit(), [tmp_path / "results"])
    assert found.note == "" and found.read == 8
    assert index(kit(), [tmp_path / "results"]).read == 0


def test_text_from_results_is_escaped_and_csv_formulas_neutralised(tmp_path):
    crafted_set(tmp_path / "results")
    markup = make_result(cap_w=650.0, workload="<img src=x onerror=alert(1)>[x](javascript:y)",
                         run_id="markup-run")
    formula = make_result(cap_w=650.0, workload='=HYPERLINK("http://evil","x")', run_id="formula-run",
                          site="+cmd")
    for doc in (markup, formula):
        write_result(tmp_path / "results", doc)
    _report(tmp_path, tmp_path / "results")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<img" not in md
    assert "&lt;img src=x onerror=alert(1)&gt;\\[x\\](javascript:y)" in md
    assert "<img src=x" not in (tmp_path / "out" / "report.html").read_text()
    with open(tmp_path / "out" / "runs.csv", newline="") as fh:
        cells = [c for row in csv.reader(fh) for c in row]
    assert "'=HYPERLINK(\"http://evil\",\"x\")" in cells and "'+cmd" in cells
    assert not any(c.startswith(("=", "+", "@")) for c in cells)


def test_long_tables_show_their_first_rows_and_keep_every_row_in_the_csv(tmp_path, monkeypatch):
    crafted_set(tmp_path / "results")
    monkeypatch.setattr(readable, "PAGE_ROWS", 3)
    _report(tmp_path, tmp_path / "results")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "… and 5 more rows: every row is in runs.csv" in md
    with open(tmp_path / "out" / "runs.csv", newline="") as fh:
        assert len(list(csv.reader(fh))) == 1 + 8


def _cli(*args):
    return CliRunner().invoke(main, ["results", *map(str, args)])


def test_results_ls_filters_and_marks_copies(tmp_path):
    docs = crafted_set(tmp_path / "results")
    h100 = docs["h100-400"]["run_id"]
    shutil.copytree(tmp_path / "results" / h100, tmp_path / "results" / "copy")
    done = _cli("ls", tmp_path / "results")
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[-1] == "9 result(s), 7 counted"
    assert any(line.startswith(h100) and " copy " in line for line in done.output.splitlines())
    done = _cli("ls", tmp_path / "results", "--gpu", "MI300X", "--counted")
    assert done.output.splitlines()[-1] == "3 result(s), 3 counted", done.output
    done = _cli("ls", tmp_path / "results", "--gpu", "h100", "--cap", "300")
    assert done.output.splitlines()[-1] == "2 result(s), 2 counted", done.output
    done = _cli("ls", tmp_path / "results", "--site", "elsewhere")
    assert done.output.splitlines()[-1] == "0 result(s), 0 counted"
    done = _cli("ls", tmp_path / "results", "--since", "2999-01-01")
    assert done.output.splitlines()[-1] == "0 result(s), 0 counted"


def test_results_show_prints_a_runs_fields(tmp_path):
    docs = crafted_set(tmp_path / "results")
    run_id = docs["mi300x-200"]["run_id"]
    done = _cli("show", run_id, tmp_path / "results")
    assert done.exit_code == 0, done.output
    fields = dict((line.split(None, 1) + [""])[:2] for line in done.output.splitlines() if line.strip())
    assert fields["device"] == "MI300X" and fields["cap_w"] == "200" and fields["enforced"] == "False"
    assert fields["sha256"] == hashlib.sha256((tmp_path / "results" / run_id / "result.json")
                                              .read_bytes()).hexdigest()
    assert "power_doc" not in fields and "extra_json" not in fields  # JSON sections: not shown
    done = _cli("show", "no-such-run", tmp_path / "results")
    assert done.exit_code != 0 and "no result with run id 'no-such-run'" in done.output


def test_results_export_writes_csv_and_zstd_parquet(tmp_path):
    import duckdb

    crafted_set(tmp_path / "results")
    done = _cli("export", tmp_path / "results", "--gpu", "H100", "-o", tmp_path / "h100.csv")
    assert done.exit_code == 0, done.output
    with open(tmp_path / "h100.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5 and {r["device"] for r in rows} == {"H100"}
    assert sorted(r["counted"] for r in rows) == ["False", "True", "True", "True", "True"]
    done = _cli("export", tmp_path / "results", "-o", tmp_path / "all.parquet")
    assert done.exit_code == 0, done.output
    con = duckdb.connect()
    assert con.execute("SELECT count(*) FROM read_parquet(?)", [str(tmp_path / "all.parquet")]).fetchone() == (8,)
    codecs = {r[0] for r in con.execute("SELECT compression FROM parquet_metadata(?)",
                                        [str(tmp_path / "all.parquet")]).fetchall()}
    assert codecs == {"ZSTD"}


@pytest.mark.parametrize("args,fragment", [
    (["--since", "yesterday"], "--since 'yesterday' is not a date"),
    (["--cap", "lots"], "--cap 'lots' is not a number of watts"),
])
def test_results_bad_filters_are_one_line_errors_before_the_index_is_touched(tmp_path, results_index,
                                                                             args, fragment):
    crafted_set(tmp_path / "results")
    done = _cli("ls", tmp_path / "results", *args)
    assert done.exit_code != 0 and fragment in done.output
    assert not results_index.exists()


def test_export_refuses_a_symlink_as_its_output(tmp_path):
    crafted_set(tmp_path / "results")
    target = tmp_path / "precious.txt"
    target.write_text("keep")
    (tmp_path / "out.csv").symlink_to(target)
    done = _cli("export", tmp_path / "results", "-o", tmp_path / "out.csv")
    assert done.exit_code != 0 and "symbolic link" in done.output and target.read_text() == "keep"


def test_read_runs_returns_runs_and_sweeps(tmp_path):
    crafted_set(tmp_path / "results")
    runs, sweeps = read_runs([tmp_path / "results"])
    assert len(runs) == 8 and sweeps == [] and all(r.content_hash for r in runs)


def test_the_cli_prints_the_first_twenty_runs_not_included_then_the_count(tmp_path, capsys):
    from hpcai.errors import ResultError
    from hpcai.launcher.report import build_report

    for i in range(25):
        (tmp_path / "results" / f"broken-{i}").mkdir(parents=True)
        (tmp_path / "results" / f"broken-{i}" / "result.json").write_text("{")
    with pytest.raises(ResultError):
        build_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
    lines = [line for line in capsys.readouterr().out.splitlines() if "not included:" in line]
    assert len(lines) == 21 and "… and 5 more" in lines[-1]
