"""CapSession.change_cap, the in-run sweep's cap changes: the pre-sweep snapshot
and journal hold across segments, on every exit. GPUs: the FAKE pynvml."""
from __future__ import annotations

import signal

import pytest

from hpcai.errors import CapNotAppliedError, CapOutOfRangeError, Interrupted
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.journal import load_journal
from hpcai.launcher.power.session import CapSession

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    state = tmp_path / "gpus.json"
    devices = fgs.make_devices(2, "nvidia")
    for d in devices:  # the site runs its GPUs at 650 W, not the default
        d["current_limit_w"] = 650.0
    fgs.install(monkeypatch, state, devices)
    backend = make_backend("nvml")
    yield state, tmp_path / "journal.json", backend
    backend.close()


def limits(state):
    return [d["current_limit_w"] for d in fgs.read_state(state)["devices"]]


def test_segments_change_the_cap_and_the_exit_restores_the_pre_sweep_snapshot(fake):
    state, journal, backend = fake
    with CapSession(backend, 300, None, journal) as session:
        session.change_cap(500)
        assert limits(state) == [500.0, 500.0]
        assert session.gpus[0]["requested_w"] == 500.0 and session.gpus[0]["applied_w"] == 500.0
        # The journal keeps the limits from before the sweep, not the last segment's.
        assert [g["limit_w"] for g in load_journal(journal)["gpus"]] == [650.0, 650.0]
        session.change_cap(200)
    assert limits(state) == [650.0, 650.0] and not journal.exists()
    assert [e["watts"] for e in fgs.read_state(state)["devices"][0]["set_log"]] == \
        [300.0, 500.0, 200.0, 650.0]


def test_a_signal_mid_sweep_restores_the_snapshot_not_the_previous_segment(fake):
    state, journal, backend = fake
    with pytest.raises(Interrupted):
        with CapSession(backend, 300, None, journal) as session:
            session.change_cap(400)
            raise Interrupted(signal.SIGTERM)
    assert limits(state) == [650.0, 650.0] and not journal.exists()


def test_a_cap_out_of_range_changes_nothing_and_one_that_does_not_take_restores(fake):
    state, journal, backend = fake
    with CapSession(backend, 300, None, journal) as session:
        with pytest.raises(CapOutOfRangeError):
            session.change_cap(900)
        assert limits(state) == [300.0, 300.0]
    with pytest.raises(CapNotAppliedError) as info:
        with CapSession(backend, 300, None, journal) as session:
            # A BMC limit of 350 W on GPU 1: a 400 W segment cap would not hold.
            fgs.update_device(state, 1, enforced_limit_w=350.0)
            session.change_cap(400)
    assert "GPU 1 enforces 350 W" in info.value.message
    assert limits(state) == [650.0, 650.0] and not journal.exists()
