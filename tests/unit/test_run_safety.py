"""Issue 14, the deterministic parts: `power restore` and a workload that
outlived its launcher, the stale journal for uncapped runs, the lifeline,
the output folder's errors, spec and site files that are not what they
claim, and the one efficiency formula. GPU libraries are the FAKES in
tests/fakes; processes, locks, files and signals are real."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcai.errors import PowerError, StaleJournalError
from hpcai.launcher.lifeline import LIFELINE_ENV, TAG_ENV, Lifeline
from hpcai.launcher.power import workload_procs
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.journal import load_journal, record_workload, write_journal
from hpcai.launcher.power.session import CapSession, restore_from_journal
from hpcai.launcher.workload_log import TracebackFilter

from conftest import ROOT, pid_alive
from fakes import fake_gpu_state as fgs


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
    state = tmp_path / "gpus.json"
    fgs.install(monkeypatch, state, fgs.make_devices(2, "nvidia"))
    return state


def limits(state) -> list[float]:
    return [d["current_limit_w"] for d in fgs.read_state(state)["devices"]]


def spawn_orphan(tag: str) -> subprocess.Popen:
    """A stand-in for ranks that outlived their launcher: own session, tagged env."""
    env = dict(os.environ, **{TAG_ENV: tag})
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                            start_new_session=True)


def capped_journal(tmp_path, state) -> Path:
    """What a SIGKILLed capped launcher leaves: limits at 300 W and its journal."""
    journal = tmp_path / "state" / "power-journal.json"
    write_journal(journal, "nvml", {i: {"uuid": f"GPU-00000000-0000-4000-8000-{i:012d}",
                                        "limit_w": 700.0} for i in range(2)})
    for i in range(2):
        fgs.update_device(state, i, current_limit_w=300.0)
    return journal


def test_restore_refuses_while_the_workload_runs_and_force_stops_it_first(tmp_path, fake_gpus):
    journal = capped_journal(tmp_path, fake_gpus)
    orphan = spawn_orphan("run-under-test")
    other = spawn_orphan("someone-else")  # another run's process is left alone
    try:
        # Recorded the way the launcher does: the group (torchrun's) and the tag (every rank).
        record_workload(journal, pgid=999_999_999, tag="run-under-test")
        assert load_journal(journal)["workload"] == {"pgid": 999_999_999, "tag": "run-under-test"}
        deadline = time.time() + 10
        while orphan.pid not in workload_procs.find({"tag": "run-under-test"}):
            assert time.time() < deadline
            time.sleep(0.05)
        with make_backend("nvml") as backend:
            with pytest.raises(PowerError) as refused:
                restore_from_journal(backend, journal)
        message = refused.value.one_line()
        assert "still running" in message and str(orphan.pid) in message
        assert "--force" in message and "kill -TERM" in message
        assert limits(fake_gpus) == [300.0, 300.0] and journal.exists()  # nothing lifted

        with make_backend("nvml") as backend:
            done = restore_from_journal(backend, journal, force=True)
        assert orphan.wait(timeout=30) == -signal.SIGTERM  # stopped first, gently
        assert done["found"] and limits(fake_gpus) == [700.0, 700.0]
        assert not journal.exists()
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


def test_a_journal_stops_an_uncapped_session_too(tmp_path, fake_gpus):
    journal = capped_journal(tmp_path, fake_gpus)
    with make_backend("nvml") as backend:
        with pytest.raises(StaleJournalError) as refused:
            CapSession(backend, None, [0, 1], journal).__enter__()
    assert "power restore" in refused.value.one_line()


def test_lifeline_held_then_released_when_its_holder_dies(tmp_path):
    """The launcher side in a child process; the workload side's check here."""
    from hpcai.workloads.lifeline import Watcher

    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\n"
                               "from hpcai.launcher.lifeline import Lifeline\n"
                               f"with Lifeline({str(tmp_path)!r}, 'tag') as line:\n"
                               "    print(line.environment(), flush=True)\n"
                               "    time.sleep(120)\n"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        env = eval(holder.stdout.readline())  # noqa: S307 (our own dict literal)
        assert env == {TAG_ENV: "tag", LIFELINE_ENV: str(tmp_path / ".lifeline")}
        watcher = Watcher(env[LIFELINE_ENV], log=lambda m: None)
        assert watcher._launcher_gone() is False
        holder.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        holder.wait()
        assert watcher._launcher_gone() is True
    finally:
        holder.kill()
        holder.wait()


def test_the_workload_does_not_inherit_the_lifeline(tmp_path):
    with Lifeline(tmp_path, "t") as line:
        code = ("import fcntl, os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                "try:\n    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
                "except BlockingIOError:\n    sys.exit(7)\n")
        done = subprocess.run([sys.executable, "-c", code, str(line.path)])
        assert done.returncode == 7  # held by the launcher, not shared with its child
    assert not (tmp_path / ".lifeline").exists()


def test_worker_tracebacks_stay_in_the_log():
    """tests/data/failed-run-output.txt: the workload.log of `hpcai-launch resnet50
    --preset tiny --device cpu --batch-size 100000000` (two ranks), paths shortened."""
    text = (ROOT / "tests" / "data" / "failed-run-output.txt").read_text()
    keep = TracebackFilter()
    shown = [line for line in text.splitlines() if keep.show(line)]
    assert len(text.splitlines()) >= 70
    assert all("Traceback" not in line and "File " not in line for line in shown)
    assert any("[hpcai] error: RuntimeError" in line for line in shown)
    assert len(shown) <= 3, shown  # two ranks' one-line errors
