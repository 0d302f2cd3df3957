"""Workload power profiles (--power-profile): the names, the NVML control, ProfileSession
and its journal, against the FAKE pynvml (tests/fakes) with profile state."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from hpcai.errors import CapNotAppliedError, Interrupted, PowerError, StaleJournalError, UsageError
from hpcai.gpu.profiles import PROFILE_IDS, profile_name
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.profiles import (
    ProfileSession,
    load_profile_journal,
    profile_controls,
    profile_journal_path,
    profile_record,
    restore_profiles_from_journal,
)
from hpcai.launcher.power.session import CapSession, install_signal_handlers, refuse_stale_journal
from hpcai.launcher.run.results import schema
from hpcai.launcher.sweep.slots import Slot, schedule

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)

MAX_Q, COMPUTE, MEMORY_BOUND = PROFILE_IDS["max-q"], PROFILE_IDS["compute"], PROFILE_IDS["memory-bound"]
OFFERED = [PROFILE_IDS["max-p"], MAX_Q, COMPUTE, MEMORY_BOUND]


class Node:
    def __init__(self, state: Path, journal: Path):
        self.state, self.journal = state, journal

    def devices(self) -> list[dict]:
        return fgs.read_state(self.state)["devices"]

    def requested(self) -> list[list[int]]:
        return [d.get("requested_profiles", []) for d in self.devices()]

    def log(self, i: int = 0) -> list[tuple]:
        return [(e["action"], e["ids"], e["result"]) for e in self.devices()[i].get("profile_log", [])]

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


def _validate(doc: dict) -> None:
    import jsonschema

    whole = schema()
    jsonschema.validate(doc, {"$defs": whole["$defs"], "$ref": "#/$defs/power_profile"})


# ---- names and the schedule -----------------------------------------------------------------
@pytest.mark.parametrize("text, name", [("MAX_Q", "max-q"), ("memory-bound", "memory-bound"),
                                        (" Compute ", "compute")])
def test_profile_names_are_nvml_names_in_any_case(text, name):
    assert profile_name(text) == name


def test_an_unknown_profile_is_a_one_line_usage_error():
    with pytest.raises(UsageError) as err:
        profile_name("turbo")
    line = err.value.one_line()
    assert "'turbo' is not an NVML workload power profile" in line and "max-q" in line
    assert "\n" not in line


def test_profiles_make_a_grid_with_caps_and_caps_alone_keep_their_order():
    slots = schedule([200.0, 300.0], 2, "ascending", 1, profiles=["max-q", "compute"])
    assert [(s.cap_w, s.profile) for s in slots[:4]] == [
        (200.0, "compute"), (200.0, "max-q"), (300.0, "compute"), (300.0, "max-q")]
    assert len(slots) == 8 and {s.repeat for s in slots} == {0, 1}
    # Without profiles, a shuffled caps-only sweep draws exactly what it always drew.
    assert [(s.cap_w, s.profile) for s in schedule([100.0, 200.0, 300.0], 1, "shuffle", 7)] == [
        (s.cap_w, None) for s in schedule([100.0, 200.0, 300.0], 1, "shuffle", 7, profiles=None)]
    assert Slot(300.0, 0, profile="max-q").describe() == "cap 300 W, profile max-q, repeat 1"


# ---- the NVML control ---------------------------------------------------------------------
def test_nvml_offered_requested_and_enforced_read_through_the_structs(node, backend_of):
    n = node(power_profiles=OFFERED, requested_profiles=[COMPUTE, MAX_Q],
             profile_conflicts={str(MAX_Q): [COMPUTE]})
    control = profile_controls(backend_of(), [0])[0]
    assert control.available() == ["max-p", "max-q", "compute", "memory-bound"]
    # The driver arbitrates: max-q conflicts with compute and wins (fake: the lower id).
    assert control.current() == {"requested": ["max-q", "compute"], "enforced": ["max-q"]}
    assert n.log() == []  # reading changes nothing


def test_no_profiles_on_the_board_or_in_the_driver_is_one_line_and_changes_nothing(node, backend_of):
    n = node()  # the default fake board has no "power_profiles": NOT_SUPPORTED
    with pytest.raises(UsageError) as err:
        with ProfileSession(backend_of(), "max-q", [0, 1], n.journal):
            pass
    assert "--power-profile max-q: GPU 0 or its driver has no workload power profiles" in err.value.one_line()
    assert "drop --power-profile" in err.value.one_line()
    assert not profile_journal_path(n.journal).exists() and n.log() == []
    devices = [dict(d, power_profiles=OFFERED) for d in n.devices()]
    fgs.write_state(n.state, devices, removed_functions=["nvmlDeviceWorkloadPowerProfileGetProfilesInfo"])
    with pytest.raises(UsageError, match="has no workload power profiles"):  # an older driver
        with ProfileSession(backend_of(), "max-q", [0], n.journal):
            pass


def test_a_profile_the_gpu_does_not_offer_is_refused_before_anything_changes(node, backend_of):
    n = node(power_profiles=[MAX_Q, COMPUTE])
    with pytest.raises(UsageError) as err:
        with ProfileSession(backend_of(), "memory-bound", [0, 1], n.journal):
            pass
    assert "not offered by GPU 0" in err.value.one_line() and "max-q, compute" in err.value.one_line()
    assert n.log() == [] and not profile_journal_path(n.journal).exists()


def test_amd_takes_determinism_and_refuses_nvml_names_in_one_line(node, backend_of):
    n = node("amd")
    backend = backend_of("amdsmi")
    with pytest.raises(UsageError) as err:
        with ProfileSession(backend, "max-q", [0, 1], n.journal):
            pass
    assert "max-q is an NVML profile and GPU 0 is AMD: use determinism-MHZ" in err.value.one_line()
    with pytest.raises(UsageError, match="2500 MHz is outside GPU 0's GFX clock range 500-2100 MHz"):
        with ProfileSession(backend, "determinism-2500", [0, 1], n.journal):
            pass
    assert all("perf_log" not in d for d in n.devices()) and not profile_journal_path(n.journal).exists()
    assert profile_name("Determinism-1400") == "determinism-1400"


def test_amd_determinism_is_set_read_back_and_the_old_level_restored(node, backend_of):
    n = node("amd", perf_level="STABLE_STD")  # a site's own level
    with ProfileSession(backend_of("amdsmi"), "determinism-1400", [0, 1], n.journal) as session:
        assert [(d["perf_level"], d["determinism_mhz"]) for d in n.devices()] == [("DETERMINISM", 1400)] * 2
        record = load_profile_journal(profile_journal_path(n.journal))
        assert record["gpus"][0]["snapshot"] == {"restore": "perf_level", "requested": ["stable_std"]}
    assert [d["perf_level"] for d in n.devices()] == ["STABLE_STD"] * 2
    assert [(e["level"], e["mhz"]) for e in n.devices()[0]["perf_log"]] == [
        ("DETERMINISM", 1400), ("STABLE_STD", None)]
    doc = profile_record(session)
    assert doc["method"] == "amdsmi" and doc["gpus"][1]["before"] == ["stable_std"]
    assert doc["gpus"][1]["read_back_enforced"] == ["determinism"] and doc["gpus"][1]["restored"]
    _validate(doc)


def test_amd_refusals_before_anything_changes(node, backend_of):
    n = node("amd", perf_level="DETERMINISM")  # its soft maximum cannot be read back
    with pytest.raises(UsageError, match="already in performance determinism mode"):
        with ProfileSession(backend_of("amdsmi"), "determinism-1400", [0, 1], n.journal):
            pass
    n = node("amd", not_supported=["perf_level"])
    with pytest.raises(UsageError) as err:
        with ProfileSession(backend_of("amdsmi"), "determinism-1400", [0, 1], n.journal):
            pass
    assert "GPU 0 or its driver has no performance determinism" in err.value.one_line()
    assert all("perf_log" not in d for d in n.devices()) and not profile_journal_path(n.journal).exists()


def test_an_amd_board_that_refuses_the_set_is_rolled_back_in_one_line(node, backend_of):
    n = node("amd")
    n.update(1, not_supported=["perf_determinism"])  # amdsmi cannot tell before trying
    with pytest.raises(PowerError) as err:
        with ProfileSession(backend_of("amdsmi"), "determinism-1400", [0, 1], n.journal):
            pass
    assert "GPU 1 or its driver has no performance determinism" in err.value.one_line()
    assert [d.get("perf_level", "AUTO") for d in n.devices()] == ["AUTO", "AUTO"]
    assert [e["level"] for e in n.devices()[0]["perf_log"]] == ["DETERMINISM", "AUTO"]
    assert not profile_journal_path(n.journal).exists()


# ---- ProfileSession ---------------------------------------------------------------------
def test_session_sets_reads_back_journals_restores_and_records(node, backend_of):
    n = node(power_profiles=OFFERED, requested_profiles=[MEMORY_BOUND])  # someone's own choice
    with ProfileSession(backend_of(), "max-q", [0, 1], n.journal) as session:
        assert n.requested() == [[MAX_Q], [MAX_Q]]  # exactly ours: the other one cleared
        record = load_profile_journal(profile_journal_path(n.journal))
        assert record["profile"] == "max-q" and record["pid"] == os.getpid()
        assert [g["snapshot"]["requested"] for g in record["gpus"]] == [["memory-bound"]] * 2
        with pytest.raises(StaleJournalError, match="power profile journal"):
            refuse_stale_journal(n.journal)  # a run may not start while it exists
    assert n.requested() == [[MEMORY_BOUND], [MEMORY_BOUND]]  # put back
    assert not profile_journal_path(n.journal).exists()
    assert n.log(0) == [("clear", [MEMORY_BOUND], "ok"), ("set", [MAX_Q], "ok"),
                        ("clear", [MAX_Q], "ok"), ("set", [MEMORY_BOUND], "ok")]
    doc = profile_record(session)
    assert doc["requested"] == "max-q" and doc["method"] == "nvml"
    gpu = doc["gpus"][0]
    assert gpu["before"] == ["memory-bound"] and gpu["read_back_requested"] == ["max-q"]
    assert gpu["read_back_enforced"] == ["max-q"] and gpu["restored"] is True
    _validate(doc)
    doc["gpus"][0]["restored"] = "yes"
    with pytest.raises(Exception, match="is not of type"):
        _validate(doc)


def test_session_without_a_profile_does_nothing(node, backend_of):
    n = node(power_profiles=OFFERED)
    with ProfileSession(backend_of(), None, [0, 1], n.journal) as session:
        pass
    assert profile_record(session) is None and n.log() == []


@pytest.mark.parametrize("exc", [RuntimeError("the workload failed"), KeyboardInterrupt(),
                                 Interrupted(signal.SIGHUP)])
def test_session_restores_on_an_error_inside_a_held_cap_session(node, backend_of, exc):
    n = node(power_profiles=OFFERED)
    backend = backend_of()
    with pytest.raises(type(exc)):
        with CapSession(backend, 300.0, [0, 1], n.journal, hold=True):
            with ProfileSession(backend, "compute", [0, 1], n.journal):
                assert n.requested() == [[COMPUTE], [COMPUTE]]
                raise exc
    assert n.requested() == [[], []]
    assert [d["current_limit_w"] for d in n.devices()] == [700.0, 700.0]
    assert not n.journal.exists() and not profile_journal_path(n.journal).exists()


def test_a_signal_ends_the_block_and_the_profile_comes_back(node, backend_of):
    n = node(power_profiles=OFFERED)
    backend = backend_of()
    with install_signal_handlers():
        with pytest.raises(Interrupted) as info:
            with CapSession(backend, None, [0, 1], n.journal, hold=True):
                with ProfileSession(backend, "max-q", [0, 1], n.journal):
                    os.kill(os.getpid(), signal.SIGTERM)  # the handler raises Interrupted here
    assert info.value.signum == signal.SIGTERM
    assert n.requested() == [[], []] and not profile_journal_path(n.journal).exists()


def test_a_profile_the_driver_does_not_enforce_is_rolled_back(node, backend_of, monkeypatch):
    from hpcai.launcher.power import restoring

    monkeypatch.setattr(restoring, "SETTLE_S", 0.1)
    n = node(power_profiles=OFFERED, ignore_profile_set=True)
    with pytest.raises(CapNotAppliedError, match="GPU 0 enforces no profile"):
        with ProfileSession(backend_of(), "max-q", [0, 1], n.journal):
            pass
    assert n.requested() == [[], []]
    assert n.log(0) == [("set", [MAX_Q], "ok"), ("clear", [MAX_Q], "ok")]
    assert not profile_journal_path(n.journal).exists()


def test_permission_error_rolls_back_and_is_one_line(node, backend_of):
    n = node(power_profiles=OFFERED)
    n.update(1, deny_set=True)  # the second GPU refuses
    with pytest.raises(PowerError) as err:
        with ProfileSession(backend_of(), "max-q", [0, 1], n.journal):
            pass
    assert "no permission to request a power profile of GPU 1" in err.value.one_line()
    assert "root" in err.value.one_line()
    assert n.requested()[0] == [] and n.log(0) == [("set", [MAX_Q], "ok"), ("clear", [MAX_Q], "ok")]


def test_power_restore_after_a_crash_puts_the_profiles_back(node, backend_of):
    n = node(power_profiles=OFFERED, requested_profiles=[COMPUTE])
    session = ProfileSession(backend_of(), "max-q", [0, 1], n.journal)
    session.__enter__()  # the launcher dies here: no __exit__ runs
    path = profile_journal_path(n.journal)
    record = json.loads(path.read_text())
    record["pid"] = 2**22 + 17  # a pid that is not running
    path.write_text(json.dumps(record))
    assert n.requested() == [[MAX_Q], [MAX_Q]]
    done = restore_profiles_from_journal(backend_of(), n.journal)
    assert done["found"] and [g["requested"] for g in done["gpus"]] == [["compute"]] * 2
    assert n.requested() == [[COMPUTE], [COMPUTE]] and not path.exists()
    assert restore_profiles_from_journal(backend_of(), n.journal)["found"] is False


def test_power_restore_refuses_while_the_run_lives(node, backend_of):
    n = node(power_profiles=OFFERED)
    session = ProfileSession(backend_of(), "max-q", [0], n.journal)
    session.__enter__()
    path = profile_journal_path(n.journal)
    record = json.loads(path.read_text())
    record["pid"] = os.getppid()
    path.write_text(json.dumps(record))
    with pytest.raises(PowerError, match="is still running"):
        restore_profiles_from_journal(backend_of(), n.journal)
    assert n.requested()[0] == [MAX_Q] and path.exists()
    session.__exit__(None, None, None)
    assert n.requested()[0] == []


def test_the_fake_profile_calls_match_the_real_binding(monkeypatch):
    """The calls, structs (fields, version words) and constants hpcai uses exist in
    the real nvidia-ml-py (installed; importing it needs no driver) as in the fake."""
    import importlib.util
    import inspect

    spec = importlib.util.find_spec("pynvml")
    if spec is None or "fakes" in (spec.origin or ""):
        pytest.fail("the real nvidia-ml-py is not installed in this environment")
    real = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", real)  # it looks itself up while loading
    spec.loader.exec_module(real)
    fake = fgs.load_fake_module("pynvml")
    for name in ("nvmlDeviceWorkloadPowerProfileGetProfilesInfo",
                 "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles",
                 "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles",
                 "nvmlDeviceWorkloadPowerProfileClearRequestedProfiles"):
        assert list(inspect.signature(getattr(real, name)).parameters) == \
            list(inspect.signature(getattr(fake, name)).parameters), name
    for struct in ("c_nvmlWorkloadPowerProfileProfilesInfo_v1_t",
                   "c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t",
                   "c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t"):
        real_s, fake_s = getattr(real, struct)(), getattr(fake, struct)()
        assert [f[0] for f in real_s._fields_] == [f[0] for f in fake_s._fields_], struct
        assert real_s.version == fake_s.version, struct
    for name, pid in PROFILE_IDS.items():
        assert getattr(real, f"NVML_POWER_PROFILE_{name.upper().replace('-', '_')}") == pid
    assert real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH == fake.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
