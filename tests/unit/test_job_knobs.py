"""launcher/power/job_knobs.py: the policy's SM clock lock and power profile for one
Slurm job, set and put back through hpcai's NVML and amdsmi controls, against the
FAKE pynvml and amdsmi (tests/fakes). The prolog and epilog that use them run on
the real Slurm in tests/integration/test_policy_prolog_slurm.py."""
from __future__ import annotations

import pytest

from hpcai.errors import CapOutOfRangeError, PowerError
from hpcai.gpu import open_library
from hpcai.gpu.profiles import PROFILE_IDS
from hpcai.launcher.power import job_knobs

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


@pytest.fixture
def devices(tmp_path, monkeypatch):
    """(the library's devices, a reader of GPU i's fake state), for the vendor given."""
    opened = []

    def make(vendor: str = "nvidia", **overrides):
        state = tmp_path / "gpus.json"
        fgs.install(monkeypatch, state, fgs.make_devices(2, vendor, **overrides))
        library = open_library(vendor)
        opened.append(library)
        return library.devices(), lambda i: fgs.read_state(state)["devices"][i]

    yield make
    for library in opened:
        library.close()


def test_an_sm_clock_lock_is_checked_set_and_reset(devices):
    (gpu, other), state = devices()
    knob = job_knobs.knob(gpu, "sm_clock_mhz")
    with pytest.raises(CapOutOfRangeError) as refused:
        knob.check(1411)  # H100: 345-1980 MHz in 15 MHz steps
    assert refused.value.one_line().startswith("the policy's sm_clock_mhz 1411 MHz is not a supported SM clock")
    assert "nearest supported: 1410 or 1425 MHz" in refused.value.one_line()
    knob.check(1410)
    before = knob.snapshot()
    knob.apply(1410)
    assert state(0)["clock_limits"]["sm"] == [345, 1410] and state(1)["clock_limits"]["sm"] is None
    said = job_knobs.restore(gpu, {"kind": "sm_clock_mhz", "restore": before})
    assert said == "SM clock lock removed" and state(0)["clock_limits"]["sm"] is None


def test_a_power_profile_is_checked_requested_and_the_old_requests_come_back(devices):
    offered = [PROFILE_IDS[n] for n in ("max-p", "max-q", "compute")]
    (gpu, _), state = devices(power_profiles=offered, requested_profiles=[PROFILE_IDS["compute"]])
    knob = job_knobs.knob(gpu, "power_profile")
    with pytest.raises(PowerError, match="not offered by GPU 0"):
        knob.check("memory-bound")
    knob.check("max-q")
    before = knob.snapshot()
    knob.apply("max-q")
    assert state(0)["requested_profiles"] == [PROFILE_IDS["max-q"]]
    job_knobs.restore(gpu, {"kind": "power_profile", "restore": before})
    assert state(0)["requested_profiles"] == [PROFILE_IDS["compute"]]


def test_a_board_without_profiles_is_refused_before_anything_changes(devices):
    (gpu, _), state = devices()  # no "power_profiles": NVML answers NOT_SUPPORTED
    with pytest.raises(PowerError, match="no workload power profiles"):
        job_knobs.knob(gpu, "power_profile").check("max-q")
    assert state(0).get("profile_log", []) == []


def test_an_amd_gpus_clock_lock_gets_its_old_maximum_back(devices):
    (gpu, _), state = devices("amd")
    knob = job_knobs.knob(gpu, "sm_clock_mhz")
    knob.check(1400)  # MI300X: the GFX levels 500, 1400, 2100 MHz
    before = knob.snapshot()
    knob.apply(1400)
    assert state(0)["clock_limits"]["sm"][1] == 1400
    job_knobs.restore(gpu, {"kind": "sm_clock_mhz", "restore": before})
    assert state(0)["clock_limits"]["sm"][1] == 2100


@pytest.mark.parametrize("recorded", [{"kind": "cap_w", "restore": {}}, {"kind": "sm_clock_mhz"},
                                      {"kind": "power_profile", "restore": "max-q"}])
def test_a_record_of_an_unknown_setting_is_refused(devices, recorded):
    (gpu, _), _ = devices()
    with pytest.raises(PowerError, match="an unknown setting in the job record"):
        job_knobs.restore(gpu, recorded)
