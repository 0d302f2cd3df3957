"""Issue 14 end to end: `hpcai-launch` for real (torchrun, two gloo processes,
real PyTorch on the CPU) on a node whose GPU library is the FAKE pynvml
(tests/fakes). Each test is a way a wrong number used to reach a result:
an orphaned workload, a stale journal, an early signal, a full disk, a
failing workload's noise."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import assert_valid_result, pid_alive
from disks import small_disk

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny", "--device", "cpu"]


class Output:
    """A launcher's merged output, read as it comes."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self.thread.start()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, self.text()
            assert time.time() < deadline, self.text()
            time.sleep(0.05)

    def text(self) -> str:
        return "".join(self.lines)


def workload_pids(tag: str) -> list[int]:
    from hpcai.launcher.power import workload_procs

    return workload_procs.find({"tag": tag})


def wait_until(check, timeout: float, what: str):
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, what
        time.sleep(0.2)


def test_a_killed_launchers_workload_stops_and_is_never_counted(fake_nvidia_node, tmp_path):
    node = fake_nvidia_node
    proc = node.popen(*TINY, "--cap", "350", "--epochs", "500", "-o", str(node.results))
    out = Output(proc)
    out.wait_for("epoch 2/")
    journal = json.loads(node.journal_files()[0].read_text())
    tag = journal["workload"]["tag"]
    assert journal["workload"]["pgid"] > 1 and workload_pids(tag)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(timeout=30)
    # The lifeline: every rank notices, the leader writes `interrupted`, all exit.
    wait_until(lambda: not workload_pids(tag), 90, "the workload outlived its launcher")
    doc = node.only_result()
    assert doc["status"] == "interrupted", doc["status"]
    assert "launcher is gone" in doc["error"]["message"]
    assert node.limits() == [350.0, 350.0]  # nobody lifted the cap under it
    done = node.launch("power", "restore")
    assert done.returncode == 0, done.stderr
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert "Traceback" not in report.stderr


def test_power_restore_refuses_under_a_running_workload_and_force_stops_it(fake_nvidia_node):
    """The workload is frozen (SIGSTOP) so that it cannot act on its lifeline, as
    one predating it, or stuck in a collective, would not."""
    node = fake_nvidia_node
    proc = node.popen(*TINY, "--cap", "350", "--epochs", "500", "-o", str(node.results))
    out = Output(proc)
    out.wait_for("epoch 2/")
    journal = json.loads(node.journal_files()[0].read_text())
    frozen = workload_pids(journal["workload"]["tag"])
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    proc.kill()
    proc.wait(timeout=30)
    refused = node.launch("power", "restore")
    assert refused.returncode != 0
    line = refused.stderr.strip().splitlines()
    assert len(line) == 1 and "still running" in line[0] and "--force" in line[0], line
    assert f"kill -TERM -- -{journal['workload']['pgid']}" in line[0]
    assert node.limits() == [350.0, 350.0]
    done = node.launch("power", "restore", "--force")
    assert done.returncode == 0, done.stderr
    assert not workload_pids(journal["workload"]["tag"])
    assert not any(pid_alive(pid) for pid in frozen)
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    assert node.only_result()["status"] == "interrupted"  # stopped gently: it wrote one


def test_an_uncapped_run_refuses_while_a_journal_exists(fake_nvidia_node):
    node = fake_nvidia_node
    node.state_dir.mkdir()
    (node.state_dir / "power-journal-x.json").write_text("{}")  # a killed run's
    for args in (TINY, [*TINY, "--cap", "300,400", "--idle-s", "30"]):
        started = time.monotonic()
        done = node.launch(*args, "-o", str(node.results),
                           "--journal", str(node.state_dir / "power-journal-x.json"))
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and len(lines) == 1, done.stderr
        assert "power restore" in lines[0] and "power journal" in lines[0]
        # The sweep refused before its 30 s idle baseline, and left nothing measured.
        assert time.monotonic() - started < 25
        assert not list(node.results.rglob("*.json")) if node.results.exists() else True


def test_every_result_records_the_limits_in_force(fake_nvidia_node, result_schema):
    """Someone left the GPUs at 300 W and deleted the journal: the uncapped
    result says so."""
    node = fake_nvidia_node
    node.update(0, current_limit_w=300.0)
    node.update(1, current_limit_w=300.0)
    done = node.launch(*TINY, "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["spec"]["power"]["cap_w"] is None
    assert [(g["index"], g["enforced_at_start_w"], g["enforced_at_end_w"], g["default_w"])
            for g in doc["launcher"]["gpu_limits"]] == [(0, 300.0, 300.0, 700.0),
                                                       (1, 300.0, 300.0, 700.0)]


def test_sigterm_in_the_first_moment_leaves_an_interrupted_result(fake_nvidia_node,
                                                                  result_schema):
    node = fake_nvidia_node
    proc = node.popen(*TINY, "--cap", "300", "-o", str(node.results))
    out = Output(proc)
    out.wait_for("hpcai: run ")  # the run folder exists; the workload is starting
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 128 + signal.SIGTERM, out.text()
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "interrupted" and "SIGTERM" in doc["error"]["message"]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []


def test_a_failing_workload_prints_one_line_and_keeps_its_tracebacks(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch(*TINY, "--batch-size", "100000000", "-o", str(node.results))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) <= 6, done.stderr
    assert lines[-1].startswith("hpcai-launch: error: run failed:")
    log = Path(lines[-1].rsplit("output is in ", 1)[1])
    assert log.name == "workload.log" and log.read_text().count("Traceback") >= 2


def small_site(tmp_path: Path, min_free_mb: float) -> str:
    """A site whose runs start with little free space (the default asks 100 MB)."""
    path = tmp_path / "small-disk.toml"
    path.write_text(f'name = "small-disk"\n[paths]\nmin_free_mb = {min_free_mb}\n')
    return str(path)


def fill(folder: Path, mounted: bool) -> None:
    if not mounted:
        folder.chmod(0o555)
        for run_dir in folder.iterdir():
            run_dir.chmod(0o555)
        return
    with contextlib.suppress(OSError), open(folder / "filler", "ab", buffering=0) as filler:
        while True:  # unbuffered: closing has nothing left to write
            filler.write(b"\0" * 65536)


def test_a_disk_that_fills_mid_run_ends_in_one_line(fake_nvidia_node, tmp_path):
    node = fake_nvidia_node
    results = tmp_path / "small"
    with small_disk(results) as mounted:
        proc = node.popen(*TINY, "--cap", "300", "--epochs", "6", "-o", str(results),
                          "--site", small_site(tmp_path, 0.5))
        out = Output(proc)
        out.wait_for("epoch 2/")
        fill(results, mounted)
        code = proc.wait(timeout=180)
        out.thread.join(timeout=10)
        text = out.text()
        assert code != 0 and "Traceback" not in text, text
        last = text.strip().splitlines()[-1]
        assert last.startswith("hpcai-launch: error: cannot write"), last
        assert str(results) in last and ("Errno 28 ENOSPC" in last or "Errno 13" in last), last
        assert node.limits() == [700.0, 700.0] and node.journal_files() == []
        for path in results.rglob("*"):
            if path.is_file() and path.name != "filler":
                assert path.stat().st_size > 0, f"empty file left: {path}"
        statuses = [json.loads(p.read_text())["status"] for p in results.glob("*/result.json")]
        assert statuses == ["failed"], statuses  # marked, in the blocks it already had
        if mounted:
            assert "is marked failed" in last, last


@pytest.mark.parametrize("min_free_mb, fragment", [
    (100, "MB free, less than the 100 MB"),  # the site's minimum catches it first
    (0, "cannot write the run spec"),  # no minimum: the write fails, and leaves nothing
])
def test_a_full_disk_at_start_refuses_and_leaves_nothing(fake_nvidia_node, tmp_path,
                                                         min_free_mb, fragment):
    node = fake_nvidia_node
    results = tmp_path / "small"
    with small_disk(results) as mounted:
        fill(results, mounted)
        done = node.launch(*TINY, "--cap", "300", "-o", str(results),
                           "--site", small_site(tmp_path, min_free_mb))
        # The error in one line (after, at most, the line saying the cap was set).
        lines = done.stderr.strip().splitlines()
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert len(lines) == 1 or (len(lines) == 2 and "power limit set" in lines[0]), lines
        assert lines[-1].startswith("hpcai-launch: error: ") and str(results) in lines[-1]
        if mounted:
            assert fragment in lines[-1], lines[-1]
        assert [p.name for p in results.iterdir()] == (["filler"] if mounted else [])
        assert node.limits() == [700.0, 700.0] and node.journal_files() == []
