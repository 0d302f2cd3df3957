"""A real process holding a cap (tests/integration/cap_child.py) is signalled;
the limits must come back and the journal go, or stay for `power restore`
after SIGKILL."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.journal import load_journal
from hpcai.launcher.power.session import restore_from_journal

TESTS = Path(__file__).resolve().parents[1]
FAKES = TESTS / "fakes"
CHILD = Path(__file__).with_name("cap_child.py")

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)
from processes import kill_marked, new_mark, popen_options  # noqa: E402


class Child:
    def __init__(self, tmp_path: Path):
        self.state = tmp_path / "gpus.json"
        self.journal = tmp_path / "state" / "power-journal.json"
        fgs.write_state(self.state, fgs.make_devices(2, "nvidia"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKES), env.get("PYTHONPATH")) if p)
        env[fgs.ENV] = str(self.state)
        self.mark = new_mark()
        # SIGHUP at its default in the child even when the suite runs under nohup.
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(self.journal)],
            **popen_options(env, self.mark),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 30.0):
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"child printed no {text!r} within {timeout} s")
            if line is None:
                pytest.fail(f"child exited before {text!r}: {self.proc.wait()} {self.proc.stderr.read()}")
            if line == text:
                return

    def limits(self) -> list[float]:
        return [d["current_limit_w"] for d in fgs.read_state(self.state)["devices"]]

    def stop(self):
        kill_marked(self.mark)
        self.proc.wait()


@pytest.fixture
def child(tmp_path):
    c = Child(tmp_path)
    yield c
    c.stop()


@pytest.mark.parametrize(
    "sig, code",
    [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130), (signal.SIGHUP, 128 + signal.SIGHUP)],
)
def test_signal_restores_limits_and_removes_journal(child, sig, code):
    child.wait_for("READY")
    assert child.limits() == [300.0, 300.0]
    assert [g["limit_w"] for g in load_journal(child.journal)["gpus"]] == [700.0, 700.0]

    child.proc.send_signal(sig)
    assert child.proc.wait(timeout=30) == code != 0
    child.wait_for(f"GOT {int(sig)}")  # the forwarding callback ran
    assert child.limits() == [700.0, 700.0]
    assert not child.journal.exists()


def test_sigkill_leaves_journal_and_restore_puts_limits_back(child, monkeypatch):
    child.wait_for("READY")
    child.proc.send_signal(signal.SIGKILL)
    assert child.proc.wait(timeout=30) == -signal.SIGKILL
    assert child.limits() == [300.0, 300.0]  # nobody cleaned up...
    record = load_journal(child.journal)  # ...but the journal says what to do
    assert record["pid"] == child.proc.pid

    fgs.install(monkeypatch, child.state, fgs.read_state(child.state)["devices"])
    with make_backend("nvml") as backend:
        result = restore_from_journal(backend, child.journal)
    assert result["found"] and all(g["ok"] for g in result["gpus"])
    assert child.limits() == [700.0, 700.0]
    assert not child.journal.exists()
