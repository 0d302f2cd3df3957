"""Clock caps (--sm-clock/--mem-clock): parsing, the grid with caps, the NVML and
amdsmi clock controls, ClockSession and its journal, against the FAKE pynvml
and amdsmi (tests/fakes) with clock state."""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pytest

from hpcai.errors import (
    CapNotAppliedError,
    CapOutOfRangeError,
    PowerError,
    PowerPermissionError,
    StaleJournalError,
    UsageError,
)
from hpcai.gpu.clocks import AmdSmiClocks, NvmlClocks, SupportedClocks, clock_control
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.clocks import (
    ClockSession,
    check_clocks,
    clock_journal_path,
    clocks_record,
    controls_for,
    load_clock_journal,
    restore_clocks_from_journal,
)
from hpcai.launcher.power.session import CapSession, refuse_stale_journal
from hpcai.launcher.run.results import schema
from hpcai.launcher.sweep.slots import Slot, schedule
from hpcai.launcher.sweep.axes import parse_clocks

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


class Node:
    def __init__(self, state: Path, journal: Path):
        self.state, self.journal = state, journal

    def devices(self) -> list[dict]:
        return fgs.read_state(self.state)["devices"]

    def limits(self, domain: str = "sm") -> list:
        return [d["clock_limits"][domain] for d in self.devices()]

    def log(self, i: int = 0) -> list[dict]:
        return self.devices()[i]["clock_log"]

    def update(self, i: int, **changes):
        fgs.update_device(self.state, i, **changes)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(vendor="nvidia", n=2, **overrides):
        state = tmp_path / "gpus.json"
        fgs.install(monkeypatch, state, fgs.make_devices(n, vendor, **overrides))
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


# ---- parsing and the grid ------------------------------------------------------------
@pytest.mark.parametrize("text, clocks", [
    ("1410", [1410]), ("1980,1005, 1410", [1005, 1410, 1980]),
    ("1005:1335:165", [1005, 1170, 1335]), ("1410MHz", [1410]), ("900:900:15,900", [900]),
])
def test_clock_lists_and_ranges(text, clocks):
    assert parse_clocks(text) == clocks


@pytest.mark.parametrize("text, fragment", [
    ("fast", "not a clock in MHz"), ("1410.5", "whole number"), ("0", "positive"),
    ("1980:1005:15", "ends below its start"), ("1005:1980", "START:STOP:STEP"),
    ("1410,,1980", "empty entry"), ("1:100000:1", "use a larger step"),
])
def test_bad_clocks_are_one_line_usage_errors(text, fragment):
    with pytest.raises(UsageError) as err:
        parse_clocks(text, "--sm-clock")
    line = err.value.one_line()
    assert fragment in line and "--sm-clock" in line and "\n" not in line


def test_caps_and_clocks_make_a_grid_in_every_round():
    slots = schedule([300.0, 400.0], 2, "shuffle", 7, [1410, 1980], [2619])
    assert len(slots) == 8
    for r in (0, 1):
        points = {(s.cap_w, s.sm_clock_mhz, s.mem_clock_mhz) for s in slots if s.repeat == r}
        assert points == {(c, s, 2619) for c in (300.0, 400.0) for s in (1410, 1980)}
    ascending = schedule([400.0, 300.0], 1, "ascending", 1, [1980, 1410])
    assert [(s.cap_w, s.sm_clock_mhz) for s in ascending] == [
        (300.0, 1410), (300.0, 1980), (400.0, 1410), (400.0, 1980)]


def test_a_caps_only_sweep_keeps_the_order_its_seed_always_gave():
    # The order before clocks existed: the sorted caps, shuffled by Random(seed).
    caps = [200.0, 300.0, 400.0, 500.0, None]
    rng, expected = random.Random(42), []
    for r in range(3):
        round_caps = sorted(caps, key=lambda c: (c is None, c or 0.0))
        rng.shuffle(round_caps)
        expected += [Slot(c, r) for c in round_caps]
    assert schedule(caps, 3, "shuffle", 42) == expected
    assert "SM" not in expected[0].describe()
    assert Slot(300.0, 0, 1410, None).describe() == "cap 300 W, SM 1410 MHz, repeat 1"


# ---- the vendor controls ----------------------------------------------------------------
def test_nvml_supported_clocks_lock_and_reset(node, backend_of):
    n = node("nvidia")
    control = clock_control(backend_of("nvml")._device(0))
    assert isinstance(control, NvmlClocks)
    sm, mem = control.supported("sm"), control.supported("mem")
    assert mem.values == (2619,) and sm.lo == 345 and sm.hi == 1980 and 1410 in sm.values
    assert sm.nearest(1411) == [1410, 1425] and sm.nearest(5000) == [1980]
    assert control.limit_mhz("sm") is None  # NVML cannot read a locked range back
    control.set_max("sm", 1410)
    assert n.limits("sm")[0] == [345, 1410]  # the lowest supported clock as the floor
    assert control.current_mhz("sm") == 1410.0
    control.restore("sm", control.snapshot("sm"))
    assert n.limits("sm")[0] is None and control.current_mhz("sm") == 1980.0
    assert [e["action"] for e in n.log(0)] == ["lock", "reset"]


def test_nvml_errors_map_as_the_real_library_raises_them(node, backend_of):
    n = node("nvidia", deny_set=True)
    control = clock_control(backend_of("nvml")._device(0))
    with pytest.raises(PowerPermissionError, match="no permission to lock the SM clock"):
        control.set_max("sm", 1410)
    assert n.limits("sm") == [None, None]
    n.update(0, deny_set=False, not_supported=["clock_lock"])
    with pytest.raises(PowerError, match="does not support clock locking"):
        control.set_max("mem", 2619)
    n.update(0, not_supported=[])
    with pytest.raises(CapOutOfRangeError, match="NVML rejected 5000 MHz"):
        control.set_max("sm", 5000)


def test_amdsmi_clock_range_is_read_capped_and_restored(node, backend_of):
    n = node("amd")
    control = clock_control(backend_of("amdsmi")._device(0))
    assert isinstance(control, AmdSmiClocks)
    sm = control.supported("sm")
    assert (sm.values, sm.lo, sm.hi) == (None, 500, 2100)  # DPM levels in Hz -> MHz range
    assert sm.accepts(1234) and not sm.accepts(2200)
    snapshot = control.snapshot("sm")
    assert snapshot == {"restore": "max_mhz", "mhz": 2100, "current_mhz": 2100.0}
    control.set_max("sm", 1400)
    assert n.limits("sm")[0] == [500, 1400]
    assert control.limit_mhz("sm") == 1400.0 and control.current_mhz("sm") == 1400.0
    control.restore("sm", snapshot)
    assert n.limits("sm")[0] == [500, 2100] and control.limit_mhz("sm") == 2100.0
    n.update(0, deny_set=True)
    with pytest.raises(PowerPermissionError):
        control.set_max("mem", 1100)
    n.update(0, deny_set=False)
    with pytest.raises(CapOutOfRangeError, match="amdsmi rejected 3000 MHz"):
        control.set_max("sm", 3000)


def test_unsupported_clocks_are_refused_with_the_nearest_ones(node, backend_of):
    node("nvidia")
    controls = controls_for(backend_of("nvml"), [0, 1])
    with pytest.raises(CapOutOfRangeError) as err:
        check_clocks(controls, 1411, None)
    line = err.value.one_line()
    assert "--sm-clock 1411 MHz is not a supported SM clock of GPU 0" in line
    assert "nearest supported: 1410 or 1425 MHz" in line
    with pytest.raises(CapOutOfRangeError) as err:
        check_clocks(controls, None, 1593)
    assert "nearest supported: 2619 MHz" in err.value.one_line()
    assert "(1 value, 2619-2619 MHz)" in err.value.one_line()
    check_clocks(controls, 1410, 2619)  # supported: no error
    assert SupportedClocks(None, 500, 2100).nearest(9999) == [500, 2100]


def test_clocks_need_a_library_power_method(node, backend_of):
    node("nvidia")
    with pytest.raises(UsageError, match="not the power method 'none'"):
        controls_for(backend_of("none"), [0])


# ---- ClockSession ------------------------------------------------------------------------
def test_session_sets_reads_back_journals_and_restores(node, backend_of):
    n = node("nvidia")
    backend = backend_of("nvml")
    with ClockSession(backend, 1410, 2619, [0, 1], n.journal) as session:
        assert n.limits("sm") == [[345, 1410]] * 2 and n.limits("mem") == [[2619, 2619]] * 2
        record = load_clock_journal(clock_journal_path(n.journal))
        assert record["pid"] and [g["domains"]["sm"]["restore"] for g in record["gpus"]] == ["reset"] * 2
        assert session.gpus[0]["sm"]["applied_mhz"] == 1410.0
        # A run may not start while this journal exists (CapSession checks it too).
        with pytest.raises(StaleJournalError, match="clock journal"):
            refuse_stale_journal(n.journal)
    assert n.limits("sm") == [None, None] and n.limits("mem") == [None, None]
    assert not clock_journal_path(n.journal).exists()
    doc = clocks_record(session, {0: {"sm": 1400.0, "mem": 2619.0}, 1: {"sm": 1500.0}})
    assert doc["requested_sm_mhz"] == 1410 and doc["gpus"][0]["sm"]["restored"] is True
    assert doc["gpus"][0]["sm"]["held"] is True and doc["gpus"][1]["sm"]["held"] is False
    import jsonschema

    whole = schema()
    jsonschema.validate(doc, {"$defs": whole["$defs"], "$ref": "#/$defs/clock_caps"})
    doc["gpus"][0]["sm"]["restore"] = "guess"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, {"$defs": whole["$defs"], "$ref": "#/$defs/clock_caps"})


def test_session_restores_on_an_exception_and_with_caps(node, backend_of):
    n = node("nvidia")
    backend = backend_of("nvml")
    with pytest.raises(RuntimeError):
        with CapSession(backend, 300.0, [0, 1], n.journal):
            with ClockSession(backend, 1005, None, [0, 1], n.journal):
                assert n.limits("sm") == [[345, 1005]] * 2
                raise RuntimeError("the workload failed")
    assert n.limits("sm") == [None, None]
    assert [d["current_limit_w"] for d in n.devices()] == [700.0, 700.0]
    assert not n.journal.exists() and not clock_journal_path(n.journal).exists()


def test_unsupported_clock_changes_nothing_and_writes_no_journal(node, backend_of):
    n = node("nvidia")
    with pytest.raises(CapOutOfRangeError):
        with ClockSession(backend_of("nvml"), 1411, None, [0, 1], n.journal):
            pass
    assert n.log(0) == [] and n.log(1) == []
    assert not clock_journal_path(n.journal).exists()


def test_a_clock_the_gpu_ignores_is_rolled_back(node, backend_of):
    n = node("nvidia", ignore_clock_set=True)
    with pytest.raises(CapNotAppliedError, match="runs its SM clock at 1980 MHz"):
        with ClockSession(backend_of("nvml"), 1410, None, [0, 1], n.journal):
            pass
    assert [e["action"] for e in n.log(0)] == ["lock", "reset"]  # rolled back
    assert not clock_journal_path(n.journal).exists()


def test_a_lock_that_takes_effect_late_is_waited_for(node, backend_of):
    # The FAKE NVML's settle_s: the GPU runs at 1980 MHz for 0.3 s after the lock,
    # as a busy H100 did (fake_gpu_state.py).
    n = node("nvidia", settle_s=0.3)
    t0 = time.monotonic()
    with ClockSession(backend_of("nvml"), 1410, None, [0, 1], n.journal) as session:
        waited = time.monotonic() - t0
        assert [session.gpus[i]["sm"]["applied_mhz"] for i in (0, 1)] == [1410.0, 1410.0]
    assert waited >= 0.3  # the first read-back saw 1980 MHz
    assert [e["action"] for e in n.log(0)] == ["lock", "reset"]


def test_permission_error_rolls_back_and_is_one_line(node, backend_of):
    n = node("nvidia")
    n.update(1, deny_set=True)  # the second GPU refuses
    with pytest.raises(PowerError) as err:
        with ClockSession(backend_of("nvml"), 1410, None, [0, 1], n.journal):
            pass
    assert "no permission to lock the SM clock of GPU 1" in err.value.one_line()
    assert n.limits("sm")[0] is None  # GPU 0 was locked, then reset
    assert [e["action"] for e in n.log(0)] == ["lock", "reset"]


def test_amd_session_restores_the_old_maximum(node, backend_of):
    n = node("amd", clock_limits={"sm": [500, 1800], "mem": None})  # a site's own limit
    with ClockSession(backend_of("amdsmi"), 1400, 1100, [0, 1], n.journal) as session:
        assert n.limits("sm") == [[500, 1400]] * 2 and n.limits("mem") == [[900, 1100]] * 2
        assert session.gpus[0]["sm"]["limit_before_mhz"] == 1800
    assert n.limits("sm") == [[500, 1800]] * 2  # not the hardware's 2100: what was there
    assert n.limits("mem") == [[900, 1300]] * 2


def test_power_restore_after_a_crash_puts_clocks_back(node, backend_of):
    n = node("nvidia")
    session = ClockSession(backend_of("nvml"), 1410, None, [0, 1], n.journal)
    session.__enter__()  # the launcher dies here: no __exit__ runs
    record = json.loads(clock_journal_path(n.journal).read_text())
    record["pid"] = 2**22 + 17  # a pid that is not running
    clock_journal_path(n.journal).write_text(json.dumps(record))
    assert n.limits("sm") == [[345, 1410]] * 2
    done = restore_clocks_from_journal(backend_of("nvml"), n.journal)
    assert done["found"] and all(g["ok"] for g in done["gpus"])
    assert n.limits("sm") == [None, None] and not clock_journal_path(n.journal).exists()
    assert restore_clocks_from_journal(backend_of("nvml"), n.journal)["found"] is False


def test_power_restore_refuses_while_the_run_lives(node, backend_of):
    n = node("nvidia")
    session = ClockSession(backend_of("nvml"), 1410, None, [0], n.journal)
    session.__enter__()
    with pytest.raises(PowerError, match="is still running"):  # this very process wrote it
        record = json.loads(clock_journal_path(n.journal).read_text())
        import os

        record["pid"] = os.getppid()
        clock_journal_path(n.journal).write_text(json.dumps(record))
        restore_clocks_from_journal(backend_of("nvml"), n.journal)
    assert n.limits("sm")[0] == [345, 1410] and clock_journal_path(n.journal).exists()
    session.__exit__(None, None, None)


def test_the_fake_clock_calls_have_the_real_bindings_signatures(monkeypatch):
    """Each NVML clock call hpcai makes exists in the real nvidia-ml-py (installed,
    no driver needed to import it) with the parameters the fake takes."""
    import importlib.util
    import inspect

    spec = importlib.util.find_spec("pynvml")
    if spec is None or "fakes" in (spec.origin or ""):
        pytest.fail("the real nvidia-ml-py is not installed in this environment")
    real = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", real)  # it looks itself up while loading
    spec.loader.exec_module(real)
    fake = fgs.load_fake_module("pynvml")
    for name in ("nvmlDeviceSetGpuLockedClocks", "nvmlDeviceResetGpuLockedClocks",
                 "nvmlDeviceSetMemoryLockedClocks", "nvmlDeviceResetMemoryLockedClocks",
                 "nvmlDeviceGetSupportedMemoryClocks", "nvmlDeviceGetSupportedGraphicsClocks",
                 "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClockInfo"):
        assert list(inspect.signature(getattr(real, name)).parameters) == \
            list(inspect.signature(getattr(fake, name)).parameters), name
    assert not hasattr(real, "nvmlDeviceGetGpuLockedClocks")  # why NVIDIA restores by reset
    for const in ("NVML_ERROR_NO_PERMISSION", "NVML_ERROR_NOT_SUPPORTED",
                  "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND", "NVML_CLOCK_SM",
                  "NVML_CLOCK_MEM"):
        assert getattr(real, const) == getattr(fake, const), const
