"""Clock caps end to end on FAKE GPU nodes (tests/fakes: pynvml and amdsmi with
clock state): a process holding caps and clocks is signalled, the launcher runs,
is killed and `power restore` replays both journals; bad input is one line and
changes nothing; a cap x clock sweep gets its own axis in the report."""
from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FakeNode, assert_valid_result, one_line_error
from fakes import fake_gpu_state as fgs
from processes import kill_marked, popen_options

from hpcai.launcher.power.clocks import clock_journal_path

TESTS = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("clock_child.py")
TINY = ["resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1"]
SHORT = ["--epochs", "1", "--warmup-epochs", "0"]
# A sweep's runs for the report: the fixed protocol (sweeps measure adaptively by
# default) and a window over 1 s, which the validity checks want before the report
# counts a run with measured power.
FIXED = ["--ci-target", "off", "--steps-per-epoch", "30"]


class Child:
    """tests/integration/clock_child.py on a fake node of two GPUs."""

    def __init__(self, tmp_path: Path, vendor: str, sm_mhz: int):
        self.node = FakeNode(tmp_path, fgs.make_devices(2, vendor))
        self.journal = self.node.state_dir / "power-journal-test.json"
        self.mark = self.node.mark
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(self.journal), vendor, str(sm_mhz)],
            **popen_options(self.node.env, self.mark), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 60.0):
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"child printed no {text!r} within {timeout} s")
            if line is None:
                pytest.fail(f"child exited before {text!r}: {self.proc.wait()} {self.proc.stderr.read()}")
            if line == text:
                return

    def clocks(self, domain: str = "sm") -> list:
        return [d["clock_limits"][domain] for d in self.node.devices()]

    def stop(self):
        kill_marked(self.mark)
        self.proc.wait()


@pytest.fixture
def child(tmp_path):
    made = []

    def make(vendor="nvidia", sm_mhz=1410):
        c = Child(tmp_path, vendor, sm_mhz)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.mark.parametrize("vendor, sig, code", [
    ("nvidia", signal.SIGTERM, 128 + signal.SIGTERM),
    ("nvidia", signal.SIGINT, 130),
    ("nvidia", signal.SIGHUP, 128 + signal.SIGHUP),
    ("amd", signal.SIGTERM, 128 + signal.SIGTERM),
    ("amd", signal.SIGINT, 130),
])
def test_a_signal_restores_clocks_and_caps(child, vendor, sig, code):
    c = child(vendor, 1410 if vendor == "nvidia" else 1400)
    c.wait_for("READY")
    locked = [[345, 1410]] * 2 if vendor == "nvidia" else [[500, 1400]] * 2
    assert c.clocks() == locked
    assert clock_journal_path(c.journal).exists() and c.journal.exists()
    c.proc.send_signal(sig)
    assert c.proc.wait(timeout=30) == code
    c.wait_for(f"GOT {int(sig)}")
    # NVIDIA: reset (unlocked); AMD: the range read before, set back.
    assert c.clocks() == ([None, None] if vendor == "nvidia" else [[500, 2100]] * 2)
    if vendor == "amd":
        assert c.clocks("mem") == [[900, 1300]] * 2
    assert [d["current_limit_w"] for d in c.node.devices()] == [fgs.make_devices(1, vendor)[0]
                                                                 ["current_limit_w"]] * 2
    assert not clock_journal_path(c.journal).exists() and not c.journal.exists()


def test_sigkill_leaves_the_clock_journal_and_power_restore_replays_it(child):
    c = child("nvidia", 1005)
    c.wait_for("READY")
    c.proc.send_signal(signal.SIGKILL)
    assert c.proc.wait(timeout=30) == -signal.SIGKILL
    assert c.clocks() == [[345, 1005]] * 2  # nobody cleaned up, but the journals say how
    # A new run refuses while the clock journal is there.
    refused = c.node.launch(*TINY, "--journal", str(c.journal), "-o", str(c.node.results))
    one_line_error(refused, "power restore")
    done = c.node.launch("power", "restore", "--journal", str(c.journal))
    assert done.returncode == 0, done.stderr
    assert "SM clock reset to the driver's default" in done.stdout
    assert c.clocks() == [None, None]
    assert [d["current_limit_w"] for d in c.node.devices()] == [700.0, 700.0]
    assert not clock_journal_path(c.journal).exists() and not c.journal.exists()


def test_a_clock_capped_run_records_set_read_back_and_restored_clocks(fake_nvidia_node,
                                                                      result_schema):
    node = fake_nvidia_node
    done = node.launch(*TINY, *SHORT, "--cap", "300", "--sm-clock", "1410", "--mem-clock", "2619",
                       "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    assert "clocks restored" in done.stderr
    for dev in node.devices():
        assert dev["clock_limits"] == {"sm": None, "mem": None}
        assert [(e["domain"], e["action"]) for e in dev["clock_log"]] == [
            ("mem", "lock"), ("sm", "lock"), ("sm", "reset"), ("mem", "reset")]
    assert node.journal_files() == []
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["spec"]["power"]["clocks"] == {"sm_mhz": 1410, "mem_mhz": 2619}
    assert doc["run_id"].endswith("-cap300W-sm1410MHz-mem2619MHz")
    clocks = doc["power"]["clocks"]
    assert clocks["method"] == "nvml" and clocks["requested_sm_mhz"] == 1410
    for gpu in clocks["gpus"]:
        assert gpu["sm"]["initial_mhz"] == 1980 and gpu["sm"]["applied_mhz"] == 1410
        assert gpu["sm"]["restored"] is True and gpu["sm"]["restore"] == "reset"
    # The sampler saw the capped clock (the fake runs at min(own, locked max)).
    used = [g for g in doc["gpus"] if g["used"]]
    assert used and all(g["sm_clock_mhz_mean"] == pytest.approx(1410) for g in used)
    assert all(g["sm"]["held"] for g in clocks["gpus"] if g["index"] in {u["index"] for u in used})


def test_an_amd_run_sets_the_clock_limit_and_puts_the_old_one_back(tmp_path, result_schema):
    node = FakeNode(tmp_path, fgs.make_devices(2, "amd"))
    try:
        done = node.launch(*TINY, *SHORT, "--sm-clock", "1400", "-o", str(node.results))
        assert done.returncode == 0, done.stderr
        for dev in node.devices():
            assert dev["clock_limits"]["sm"] == [500, 2100]  # the range read before
            assert [(e["action"], e["mhz"]) for e in dev["clock_log"]] == [("max", 1400), ("max", 2100)]
        doc = node.only_result()
        assert_valid_result(doc, result_schema)
        gpu = doc["power"]["clocks"]["gpus"][0]["sm"]
        assert gpu["restore"] == "max_mhz" and gpu["limit_before_mhz"] == 2100
        assert gpu["limit_mhz"] == 1400 and gpu["restored"] is True
    finally:
        node.stop_everything()


def test_killed_launcher_leaves_clocks_to_power_restore(fake_nvidia_node):
    node = fake_nvidia_node
    proc = node.popen(*TINY, "--sm-clock", "1005", "--epochs", "500", "-o", str(node.results))
    deadline = time.time() + 120

    def workload_journalled():
        path = [p for p in node.journal_files() if p.name.endswith(".clocks.json")]
        return path and "workload" in json.loads(path[0].read_text())

    while not workload_journalled():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() else ""
        time.sleep(0.2)
    assert [d["clock_limits"]["sm"] for d in node.devices()] == [[345, 1005]] * 2
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(timeout=30)
    from hpcai.launcher.power import workload_procs

    journal = [p for p in node.journal_files() if p.name.endswith(".clocks.json")][0]
    workload = json.loads(journal.read_text())["workload"]
    while workload_procs.find(workload):  # the lifeline stops it
        assert time.time() < deadline + 60, "the workload outlived its launcher"
        time.sleep(0.2)
    done = node.launch("power", "restore")
    assert done.returncode == 0, done.stderr
    assert [d["clock_limits"]["sm"] for d in node.devices()] == [None, None]
    assert node.journal_files() == []


def test_clock_caps_without_gpus_are_one_line_and_change_nothing(cpu_node):
    done = cpu_node.launch(*TINY, "--sm-clock", "1410", "-o", str(cpu_node.results))
    one_line_error(done, "--sm-clock needs GPUs")
    assert not cpu_node.results.exists() and cpu_node.journal_files() == []
    dry = cpu_node.launch(*TINY, "--sm-clock", "1410", "--mem-clock", "2619", "--dry-run", "--json",
                          "-o", str(cpu_node.results))
    assert dry.returncode == 0, dry.stderr
    spec = json.loads(dry.stdout[:dry.stdout.rindex("}") + 1])
    assert spec["power"]["clocks"] == {"sm_mhz": 1410, "mem_mhz": 2619}
    assert "clock caps were not checked" in dry.stderr
    assert not cpu_node.results.exists()


def test_an_unsupported_clock_is_one_line_and_changes_nothing(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch(*TINY, "--sm-clock", "1411", "--cap", "300", "-o", str(node.results))
    one_line_error(done, "--sm-clock 1411 MHz is not a supported SM clock of GPU 0",
                   "nearest supported: 1410 or 1425 MHz")
    for dev in node.devices():
        assert dev["clock_log"] == [] and dev["set_log"] == []  # no cap set either
    assert not node.results.exists() and node.journal_files() == []
    sweep = node.launch(*TINY, "--sm-clock", "1410,1411", "-o", str(node.results))
    one_line_error(sweep, "1411 MHz")  # every clock of a sweep is checked first
    assert all(dev["clock_log"] == [] for dev in node.devices())
    bad = node.launch(*TINY, "--mem-clock", "fast", "-o", str(node.results))
    one_line_error(bad, "--mem-clock 'fast' is not a clock in MHz")


def test_no_permission_is_one_line_and_leaves_nothing_set(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(2, "nvidia", deny_set=True))
    try:
        done = node.launch(*TINY, "--sm-clock", "1410", "-o", str(node.results))
        one_line_error(done, "no permission to lock the SM clock of GPU 0", "root")
        assert [d["clock_limits"]["sm"] for d in node.devices()] == [None, None]
        assert node.journal_files() == []
    finally:
        node.stop_everything()


def test_a_cap_by_clock_sweep_gives_clocks_their_own_axis_in_the_report(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia"))
    try:
        done = node.launch(*TINY, *SHORT, *FIXED, "--cap", "300", "--sm-clock", "1005,1980",
                           "--idle-s", "0", "--seed", "3", "-o", str(node.results))
        assert done.returncode == 0, done.stderr
        summary = json.loads(next(node.results.glob("sweep-*/sweep.json")).read_text())
        assert summary["sm_clocks_mhz"] == [1005, 1980]
        assert sorted((r["cap_w"], r["sm_clock_mhz"]) for r in summary["runs"]) == [
            (300.0, 1005), (300.0, 1980)]
        assert all(r["status"] == "complete" for r in summary["runs"])
        # The same command again finds both slots done (clocks are part of the slot).
        again = node.launch(*TINY, *SHORT, *FIXED, "--cap", "300", "--sm-clock", "1005,1980",
                            "--idle-s", "0", "-o", str(node.results))
        assert again.returncode == 0 and again.stdout.count("already complete") == 2
        report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
        assert report.returncode == 0, report.stderr
        md = (tmp_path / "report" / "report.md").read_text()
        assert "resnet50 (tiny), SM 1005 MHz | CPU ×1" in md
        assert "resnet50 (tiny), SM 1980 MHz | CPU ×1" in md
        rows = [line for line in md.splitlines() if line.startswith("| resnet50 (tiny) | CPU")]
        assert len(rows) == 2 and "| 1005 MHz | own | 300 W |" in rows[0]
        assert "| 1005 |" in rows[0] and "| 1980 |" in rows[1]  # measured SM clock per row
        data = json.loads((tmp_path / "report" / "report.json").read_text())
        assert data["tables"]["clock-caps"]["header"][2] == "SM clock cap"
    finally:
        node.stop_everything()


def test_a_clock_sweep_dry_run_shows_the_grid_and_changes_nothing(fake_nvidia_node):
    node = fake_nvidia_node
    dry = node.launch(*TINY, "--cap", "300,400", "--sm-clock", "1410,1980", "--dry-run", "--json",
                      "--seed", "5", "-o", str(node.results))
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout[:dry.stdout.index("\ncommand of the first run")])
    assert sorted((r["cap_w"], r["sm_clock_mhz"]) for r in plan["runs"]) == [
        (300.0, 1410), (300.0, 1980), (400.0, 1410), (400.0, 1980)]
    assert all("mem_clock_mhz" not in r for r in plan["runs"])
    assert all(d["clock_log"] == [] and d["set_log"] == [] for d in node.devices())
    assert not node.results.exists() and node.journal_files() == []
