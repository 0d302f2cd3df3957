"""Hostile files (issue 25, section 3): links planted where hpcai writes.
Nothing is ever written through one: a link at a file's name is replaced by
the new file (its target untouched), a link in a folder's place is refused.
hpcai often runs as root, so a followed link would let any user redirect
root's writes."""
from __future__ import annotations

import errno
import json

import pytest

from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.run.workload_log import LogFollower
from hpcai.measure.telemetry import Sampler
from hpcai.safe_files import Folder
from hpcai.result_document import write_json_atomic
from report_docs import make_result, write_result
from conftest import one_line_error


@pytest.fixture
def victim(tmp_path):
    """A file someone wants overwritten (root's, say)."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    return path


def test_a_link_at_a_results_name_is_replaced_not_written_through(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").symlink_to(victim)
    write_json_atomic(run / "result.json", {"status": "complete"})
    assert victim.read_text() == "precious\n"
    assert not (run / "result.json").is_symlink()
    assert json.loads((run / "result.json").read_text()) == {"status": "complete"}
    assert [p.name for p in run.iterdir()] == ["result.json"]  # no temp file left


def test_a_link_in_a_run_folders_place_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").symlink_to(elsewhere)
    with pytest.raises(OSError) as refused:
        write_json_atomic(tmp_path / "run" / "result.json", {"status": "complete"})
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert list(elsewhere.iterdir()) == []


def test_new_files_are_made_exclusively_and_never_writable_by_others(tmp_path, victim):
    with Folder.open(tmp_path / "f", create=True) as folder:
        (tmp_path / "f" / "planted").symlink_to(victim)
        with pytest.raises(FileExistsError):
            folder.create_new("planted")
        folder.write_text("plain", "x")
        with pytest.raises(ValueError):
            folder.write_text("../escape", "x")
    assert (tmp_path / "f" / "plain").stat().st_mode & 0o022 == 0
    assert victim.read_text() == "precious\n"


def test_samples_are_not_written_through_a_planted_link(tmp_path, victim):
    (tmp_path / "samples.csv").symlink_to(victim)
    Sampler([], 0.1).write_csv(tmp_path / "samples.csv", [])
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "samples.csv").read_text().startswith("t,source,")


def test_the_workload_log_is_not_appended_through_a_planted_link(tmp_path, victim):
    (tmp_path / "workload.log").symlink_to(victim)
    with pytest.raises(OSError):
        LogFollower(tmp_path).open_for_workload()
    assert victim.read_text() == "precious\n"


def test_an_engine_processes_log_is_not_appended_through_a_planted_link(tmp_path, victim):
    """workloads/engine_process.GroupProcess (the sglang server's log, an exec command's)."""
    import sys

    from hpcai.workloads.engine_process import GroupProcess

    (tmp_path / "server.log").symlink_to(victim)
    proc = GroupProcess("echo", [sys.executable, "-c", "print('hello')"], tmp_path / "server.log")
    proc.start()
    proc.wait(timeout=60)
    assert victim.read_text() == "precious\n"


def test_report_files_are_not_written_through_planted_links(tmp_path, victim):
    write_result(tmp_path / "results", make_result())
    out = tmp_path / "report"
    out.mkdir()
    for name in ("report.md", "report.html", "report.json", "cells.csv"):
        (out / name).symlink_to(victim)
    make_report([tmp_path / "results"], ReportOptions(output=str(out)))
    assert victim.read_text() == "precious\n"
    for name in ("report.md", "report.html", "report.json", "cells.csv"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0


def test_report_into_a_link_is_a_one_line_error(cpu_node, tmp_path):
    write_result(tmp_path / "results", make_result())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "report").symlink_to(elsewhere)
    done = cpu_node.launch("report", str(tmp_path / "results"), "-o", str(tmp_path / "report"))
    one_line_error(done, "cannot create report folder", "symbolic link")
    assert list(elsewhere.iterdir()) == []


def _sweep_folder(node) -> str:
    args = ["resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1", "--cap", "200,300",
            "--idle-s", "0", "-o", str(node.results)]
    plan = node.launch(*args, "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    text = plan.stdout.split("\ncommand of the first run:")[0]
    return json.loads(text)["folder"], args


@pytest.mark.parametrize("planted", ["a link", "a folder others can write"])
def test_a_planted_sweep_folder_is_refused_before_any_cap(fake_nvidia_node, tmp_path, planted):
    """Sweep folder names are predictable (resume finds them by name): one that
    someone else planted is refused in one line, before anything is set."""
    node = fake_nvidia_node
    folder, args = _sweep_folder(node)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    node.results.mkdir(parents=True, exist_ok=True)
    if planted == "a link":
        (node.results / folder.rsplit("/", 1)[1]).symlink_to(elsewhere)
        expected = "is a symbolic link"
    else:
        (node.results / folder.rsplit("/", 1)[1]).mkdir(mode=0o777)
        (node.results / folder.rsplit("/", 1)[1]).chmod(0o777)
        expected = "can be written by other users"
    done = node.launch(*args)
    one_line_error(done, "the sweep folder", expected)
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    assert list(elsewhere.iterdir()) == []


LONG = 64 << 20  # a line without a newline this long (the was 300 MB)


def test_a_huge_line_without_a_newline_is_echoed_cut_and_never_held_whole(tmp_path):
    """LogFollower (the launcher's echo of workload.log) reads and keeps at most a
    bounded piece; the log keeps every byte."""
    import io
    import tracemalloc

    with open(tmp_path / "workload.log", "wb") as fh:
        fh.write(b"x" * LONG + b"\nnext line\n")
    out = io.StringIO()
    follower = LogFollower(tmp_path, out=out)
    tracemalloc.start()
    follower.start()
    follower.stop()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MB held for one line"
    first, second = out.getvalue().splitlines()[:2]
    assert first.endswith(f"[… {LONG - (64 << 10)} more bytes of this line are in the log]")
    assert second == "next line"
    assert (tmp_path / "workload.log").stat().st_size == LONG + len(b"\nnext line\n")


def test_an_engine_processes_huge_line_is_copied_in_pieces(tmp_path):
    import sys
    import tracemalloc

    from hpcai.workloads.engine_process import GroupProcess

    code = f"import sys; sys.stdout.write('x' * {LONG}); print(); print('ready', flush=True)"
    proc = GroupProcess("long", [sys.executable, "-c", code], tmp_path / "server.log")
    tracemalloc.start()
    proc.start(watch=("ready",))
    proc.wait(timeout=120)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MB held for one line"
    assert proc.first_time("ready") is not None
    assert (tmp_path / "server.log").stat().st_size == LONG + len("\nready\n")

