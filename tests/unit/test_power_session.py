"""CapSession, the journal, restore_from_journal and the signal helpers."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcai.errors import (
    CapNotAppliedError,
    CapOutOfRangeError,
    ConfigError,
    Interrupted,
    PowerError,
    PowerPermissionError,
    StaleJournalError,
)
from hpcai.launcher.power import journal as journal_mod
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.journal import default_journal_path, load_journal, write_journal
from hpcai.launcher.power import restoring
from hpcai.launcher.power.session import CapSession, restore_from_journal
from hpcai.signals import deferred_signals, install_signal_handlers

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


class Node:
    def __init__(self, state: Path, journal: Path):
        self.state, self.journal = state, journal

    def limits(self) -> list[float]:
        return [d["current_limit_w"] for d in fgs.read_state(self.state)["devices"]]

    def set_log(self, i: int) -> list[dict]:
        return fgs.read_state(self.state)["devices"][i]["set_log"]

    def update(self, i: int, **changes):
        fgs.update_device(self.state, i, **changes)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(devices=None):
        state = tmp_path / "gpus.json"
        fgs.install(monkeypatch, state, devices or fgs.make_devices(2, "nvidia"))
        return Node(state, tmp_path / "state" / "power-journal-test.json")

    return make


@pytest.fixture
def backend_of():
    opened = []

    def make(method="nvml"):
        backend = make_backend(method)
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()


class Spy:
    """Wraps a backend to observe (or disturb) calls."""

    def __init__(self, inner, on_set=None):
        self.inner, self.on_set, self.calls = inner, on_set, []
        self.name = inner.name

    def gpus(self):
        return self.inner.gpus()

    def limits(self, index):
        return self.inner.limits(index)

    def set_limit_w(self, index, watts):
        self.calls.append((index, watts))
        if self.on_set:
            self.on_set(index, watts)
        self.inner.set_limit_w(index, watts)

    def can_set(self):
        return self.inner.can_set()

    def close(self):
        self.inner.close()


# -- the normal path ------------------------------------------------------------------
def test_cap_applied_inside_and_restored_after(node, backend_of):
    n = node()
    with CapSession(backend_of(), 300, None, n.journal) as session:
        assert n.limits() == [300.0, 300.0]
        record = load_journal(n.journal)
        assert [g["limit_w"] for g in record["gpus"]] == [700.0, 700.0]
        assert record["method"] == "nvml" and record["pid"] == os.getpid()
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()
    g = session.gpus[1]
    assert (g["default_w"], g["min_w"], g["max_w"]) == (700.0, 200.0, 700.0)
    assert (g["initial_w"], g["requested_w"], g["applied_w"], g["restored_w"]) == (700.0, 300.0, 300.0, 700.0)
    assert session.to_dict()["gpus"]["1"]["index"] == 1


def test_selected_gpus_only(node, backend_of):
    n = node(fgs.make_devices(3, "nvidia"))
    with CapSession(backend_of(), 400, [2], n.journal) as session:
        assert n.limits() == [700.0, 700.0, 400.0]
    assert list(session.gpus) == [2]
    assert n.limits() == [700.0, 700.0, 700.0]


def test_no_cap_only_records(node, backend_of):
    n = node(fgs.make_devices(2, "nvidia", current_limit_w=650.0))
    with CapSession(backend_of(), None, None, n.journal) as session:
        assert not n.journal.exists()
    assert session.gpus[0]["applied_w"] == 650.0 and session.gpus[0]["requested_w"] is None
    assert n.set_log(0) == [] and n.set_log(1) == []


# -- refusing before changing anything ---------------------------------------------------
def test_out_of_range_cap_changes_nothing(node, backend_of):
    devices = fgs.make_devices(2, "nvidia")
    devices[1]["min_limit_w"] = 250.0
    n = node(devices)
    with pytest.raises(CapOutOfRangeError) as info:
        with CapSession(backend_of(), 220, None, n.journal):
            pytest.fail("entered")
    assert "GPU 1" in info.value.message and "250-700" in info.value.message
    assert "between 250 and 700" in info.value.hint
    assert n.set_log(0) == [] and n.set_log(1) == []
    assert not n.journal.exists()


def test_stale_journal_is_refused(node, backend_of):
    n = node()
    write_journal(n.journal, "nvml", {0: {"uuid": "x", "limit_w": 700.0}})
    with pytest.raises(StaleJournalError) as info:
        with CapSession(backend_of(), 300, None, n.journal):
            pytest.fail("entered")
    assert str(n.journal) in info.value.message and f"pid {os.getpid()}" in info.value.message
    assert "hpcai-launch power restore" in info.value.hint
    assert n.set_log(0) == [] and n.journal.exists()


def test_unreadable_stale_journal_is_refused_too(node, backend_of):
    n = node()
    n.journal.parent.mkdir(parents=True)
    n.journal.write_text("{not json")
    with pytest.raises(StaleJournalError):
        with CapSession(backend_of(), 300, None, n.journal):
            pass
    assert n.set_log(0) == []


def test_unwritable_journal_stops_before_any_change(node, backend_of, tmp_path):
    n = node()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(PowerError, match="cannot write the power journal") as info:
        with CapSession(backend_of(), 300, None, tmp_path / "a-file" / "journal.json"):
            pytest.fail("entered")
    assert "HPCAI_STATE_DIR" in info.value.hint
    assert n.set_log(0) == [] and n.limits() == [700.0, 700.0]


# -- failures while setting roll back ----------------------------------------------------------
def test_permission_denied_leaves_nothing_changed_and_no_journal(node, backend_of):
    n = node(fgs.make_devices(2, "nvidia", deny_set=True))
    with pytest.raises(PowerPermissionError):
        with CapSession(backend_of(), 300, None, n.journal):
            pytest.fail("entered")
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


def test_permission_denied_on_second_gpu_restores_the_first(node, backend_of):
    devices = fgs.make_devices(2, "nvidia")
    devices[1]["deny_set"] = True
    n = node(devices)
    with pytest.raises(PowerPermissionError):
        with CapSession(backend_of(), 300, None, n.journal):
            pass
    assert [e["watts"] for e in n.set_log(0)] == [300.0, 700.0]  # set, then restored
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


def test_ignored_set_raises_cap_not_applied_and_restores(node, backend_of):
    devices = fgs.make_devices(2, "nvidia")
    devices[1]["ignore_set"] = True
    n = node(devices)
    with pytest.raises(CapNotAppliedError) as info:
        with CapSession(backend_of(), 300, None, n.journal):
            pytest.fail("entered")
    assert "GPU 1 reads 700 W" in info.value.message
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


def test_an_enforced_limit_that_follows_late_is_waited_for(node, backend_of):
    # The FAKE NVML's settle_s: the enforced limit reads the previous one for 0.3 s
    # after a set, as on an H100 (fake_gpu_state.py); the requested one at once.
    n = node(fgs.make_devices(2, "nvidia", settle_s=0.3))
    t0 = time.monotonic()
    with CapSession(backend_of(), 300, None, n.journal) as session:
        waited = time.monotonic() - t0
        assert [session.gpus[i]["enforced_w"] for i in (0, 1)] == [300.0, 300.0]
    assert waited >= 0.3  # the first read-back saw 700 W enforced
    assert n.limits() == [700.0, 700.0]


def test_an_enforced_limit_that_never_follows_fails_after_settling(node, backend_of):
    devices = fgs.make_devices(2, "nvidia")
    devices[1]["enforced_limit_w"] = 250.0  # a BMC's limit below the cap
    n = node(devices)
    with pytest.raises(CapNotAppliedError) as info:
        with CapSession(backend_of(), 300, None, n.journal):
            pytest.fail("entered")
    assert f"GPU 1 enforces 250 W after {restoring.SETTLE_S:g} s" in info.value.message
    assert n.limits() == [700.0, 700.0] and not n.journal.exists()


def test_journal_is_written_before_the_first_set(node, backend_of):
    n = node()
    seen = []

    def check(index, watts):
        if not seen:
            seen.append(load_journal(n.journal))

    spy = Spy(backend_of(), on_set=check)
    with CapSession(spy, 300, None, n.journal):
        pass
    assert seen[0] is not None
    assert [g["limit_w"] for g in seen[0]["gpus"]] == [700.0, 700.0]
    assert spy.calls[:2] == [(0, 300.0), (1, 300.0)]


def test_interrupt_while_setting_rolls_back(node, backend_of):
    n = node()

    def interrupt(index, watts):
        if index == 1 and watts == 300.0:
            raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        with CapSession(Spy(backend_of(), on_set=interrupt), 300, None, n.journal):
            pass
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


# -- exits restore ---------------------------------------------------------------------------------
@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt(), Interrupted(signal.SIGHUP)])
def test_any_exception_inside_restores(node, backend_of, exc):
    n = node()
    with pytest.raises(type(exc)):
        with CapSession(backend_of(), 250, None, n.journal):
            assert n.limits() == [250.0, 250.0]
            raise exc
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


def test_failed_restore_keeps_journal_and_says_what_to_run(node, backend_of):
    n = node()
    with pytest.raises(PowerError) as info:
        with CapSession(backend_of(), 300, None, n.journal):
            n.update(1, deny_set=True)
    assert "GPU 1" in info.value.message
    assert "hpcai-launch power restore" in info.value.hint
    assert n.limits() == [700.0, 300.0]
    assert n.journal.exists()
    # Once the permission is back, the journal restores the rest.
    n.update(1, deny_set=False)
    with make_backend("nvml") as backend:
        result = restore_from_journal(backend, n.journal)
    assert [g["ok"] for g in result["gpus"]] == [True, True]
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


def test_signal_during_restore_is_deferred_then_raised(node, backend_of):
    n = node()
    sent = []

    def second_sigterm(index, watts):
        if watts == 700.0 and not sent:  # the first restore call
            sent.append(index)
            os.kill(os.getpid(), signal.SIGTERM)

    with install_signal_handlers():
        with pytest.raises(Interrupted) as info:
            with CapSession(Spy(backend_of(), on_set=second_sigterm), 300, None, n.journal):
                pass
    assert info.value.signum == signal.SIGTERM
    assert sent and n.limits() == [700.0, 700.0]  # both restored despite the signal
    assert not n.journal.exists()


# -- restore_from_journal -------------------------------------------------------------------------------
def test_restore_without_journal_is_a_message(node, backend_of):
    n = node()
    result = restore_from_journal(backend_of(), n.journal)
    assert result["found"] is False and "nothing to restore" in result["message"]


def test_restore_after_a_crash(node, backend_of):
    n = node()
    session = CapSession(backend_of(), 300, None, n.journal)
    session.__enter__()  # ... and the process "dies" without __exit__
    session.authority._release()  # as the kernel drops a dead process's flock
    assert n.limits() == [300.0, 300.0]
    result = restore_from_journal(backend_of(), n.journal)
    assert result["found"] is True and [g["read_back_w"] for g in result["gpus"]] == [700.0, 700.0]
    assert n.limits() == [700.0, 700.0]
    assert not n.journal.exists()


def test_restore_matches_gpus_by_uuid(node, backend_of):
    devices = fgs.make_devices(2, "nvidia", current_limit_w=300.0)
    n = node(devices)
    # Journal indices swapped relative to the node: the UUIDs must win.
    write_journal(
        n.journal,
        "nvml",
        {0: {"uuid": devices[1]["uuid"], "limit_w": 650.0}, 1: {"uuid": devices[0]["uuid"], "limit_w": 600.0}},
    )
    restore_from_journal(backend_of(), n.journal)
    assert n.limits() == [600.0, 650.0]


def test_restore_with_unknown_uuid_fails_and_keeps_journal(node, backend_of):
    n = node()
    write_journal(n.journal, "nvml", {0: {"uuid": "GPU-gone", "limit_w": 650.0}})
    with pytest.raises(PowerError, match="GPU-gone"):
        restore_from_journal(backend_of(), n.journal)
    assert n.journal.exists()


def test_restore_refuses_a_journal_of_a_running_process(node, backend_of):
    n = node()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        write_journal(n.journal, "nvml", {0: {"uuid": None, "limit_w": 650.0}})
        data = json.loads(n.journal.read_text())
        data["pid"] = sleeper.pid
        n.journal.write_text(json.dumps(data))
        with pytest.raises(PowerError, match="still running"):
            restore_from_journal(backend_of(), n.journal)
        assert n.limits() == [700.0, 700.0]
        restore_from_journal(backend_of(), n.journal, force=True)  # uuid None: by index
        assert n.limits() == [650.0, 700.0]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_restore_refuses_a_journal_from_another_host(node, backend_of):
    n = node()
    write_journal(n.journal, "nvml", {0: {"uuid": None, "limit_w": 650.0}})
    data = json.loads(n.journal.read_text())
    data["hostname"] = "some-other-node"
    n.journal.write_text(json.dumps(data))
    with pytest.raises(PowerError, match="some-other-node"):
        restore_from_journal(backend_of(), n.journal)


# -- journal -----------------------------------------------------------------------------------------
def test_default_journal_path_order(monkeypatch, tmp_path):
    monkeypatch.setenv("HPCAI_STATE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "b"))
    assert default_journal_path("n1") == tmp_path / "a" / "power-journal-n1.json"
    monkeypatch.delenv("HPCAI_STATE_DIR")
    assert default_journal_path("n1") == tmp_path / "b" / "hpcai" / "power-journal-n1.json"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_journal_path("n1") == tmp_path / "home" / ".local" / "state" / "hpcai" / "power-journal-n1.json"


def test_journal_write_is_atomic_and_load_validates(tmp_path, monkeypatch):
    path = tmp_path / "j" / "power-journal-x.json"
    linked = []
    real_link = os.link
    # Published by a hard link of a complete temporary file in the same folder (safe_files'
    # Folder.creating, by the folder's descriptor): atomic, and never over another's.
    monkeypatch.setattr(journal_mod.os, "link",
                        lambda a, b, **kw: (linked.append((a, b, kw)), real_link(a, b, **kw)))
    record = write_journal(path, "command", {1: {"uuid": "u1", "limit_w": 500}})
    assert linked and linked[0][1] == path.name and linked[0][0].startswith(f".{path.name}.")
    assert linked[0][2]["src_dir_fd"] == linked[0][2]["dst_dir_fd"]
    assert load_journal(path) == record
    assert record["gpus"] == [{"index": 1, "uuid": "u1", "limit_w": 500.0}]
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind
    assert load_journal(tmp_path / "absent.json") is None
    path.write_text('{"gpus": [{"index": 0}]}')
    with pytest.raises(ConfigError):
        load_journal(path)


# -- signal helpers ----------------------------------------------------------------------------------
def test_sigterm_and_sighup_raise_interrupted_and_call_back():
    called = []
    before = signal.getsignal(signal.SIGTERM)
    # A suite started under nohup inherits SIGHUP ignored, and one started in the
    # background by a non-interactive shell SIGINT ignored, which the handlers rightly
    # keep (next test): this one needs both at their defaults to see them handled.
    hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    intr = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with install_signal_handlers(callback=called.append):
            for sig in (signal.SIGTERM, signal.SIGHUP):
                with pytest.raises(Interrupted) as info:
                    os.kill(os.getpid(), sig)
                assert info.value.signum == sig and info.value.exit_code == 128 + sig
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGHUP, hup)
        signal.signal(signal.SIGINT, intr)
    assert called == [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is before


def test_ignored_sighup_stays_ignored(monkeypatch):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with install_signal_handlers():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # nothing happens
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_deferred_signals_record_instead_of_raising():
    with install_signal_handlers():
        with deferred_signals() as received:
            os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM]
