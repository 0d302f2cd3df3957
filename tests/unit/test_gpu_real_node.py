"""What a real GPU node does that the first fakes hid (issue 12), against the
FAKE pynvml/amdsmi (tests/fakes), each behaviour cited there from the real
library's source or documentation."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpcai.errors import DeviceError
from hpcai.gpu import open_library
from hpcai.gpu.amd import AmdLibrary
from hpcai.gpu.nvidia import NvidiaLibrary
from hpcai.launcher.power.backends import make_backend

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(devices, **top):
        path = tmp_path / "gpus.json"
        make.mods = fgs.install(monkeypatch, path, devices, **top)
        return path

    return make


# ---- NVIDIA -------------------------------------------------------------------
def test_gpus_outside_the_jobs_cgroup_are_skipped_and_recorded(node):
    devices = fgs.make_devices(4, "nvidia")
    devices[0]["inaccessible"] = "no_permission"
    devices[1]["inaccessible"] = "no_permission"
    devices[3]["inaccessible"] = "gpu_is_lost"
    node(devices)
    library = open_library("auto")  # was None: the first NoPermission hid every GPU
    assert library is not None
    with library:
        assert [d.info().index for d in library.devices()] == [2]
        assert library.devices()[0].info().uuid == devices[2]["uuid"]
        assert [(g["index"], g["reason"]) for g in library.inaccessible] == [
            (0, "Insufficient Permissions"), (1, "Insufficient Permissions"), (3, "GPU is lost")]


def test_one_failing_metric_keeps_power_energy_and_the_power_backend(node):
    no_permission = 4  # nvmlDeviceGetMemoryInfo in a MIG container
    node(fgs.make_devices(1, "nvidia", errors={"memory_used": no_permission,
                                               "utilization": 10, "temperature": 999}))
    with NvidiaLibrary() as lib:
        dev = lib.devices()[0]
        reading = dev.read()
        info = dev.info()
        assert "nvmlDeviceGetMemoryInfo" in dev.failures
    assert reading.power_w == pytest.approx(650.0) and reading.energy_j is not None
    assert reading.memory_used_bytes is None and reading.utilization_pct is None
    assert reading.temperature_c is None
    assert info.memory_total_bytes == 0 and info.uuid.startswith("GPU-")
    with make_backend("nvml", "nvidia") as backend:  # info() failed here before
        assert backend.limits(0).current_w == pytest.approx(700.0)


def test_mig_mode_is_detected_with_its_slices(node):
    slices = ["MIG-11111111-2222-3333-4444-555555555555", "MIG-aaaaaaaa-2222-3333-4444-555555555555"]
    devices = fgs.make_devices(2, "nvidia")
    devices[1]["mig"] = slices
    node(devices)
    with NvidiaLibrary() as lib:
        first, second = (d.info() for d in lib.devices())
    assert not first.mig_enabled and first.mig_uuids == ()
    assert second.mig_enabled and list(second.mig_uuids) == slices


def test_newer_throttle_bits_are_named(node):
    node(fgs.make_devices(1, "nvidia", throttle_reasons=0x4 | 0x200 | 0x400))
    with NvidiaLibrary() as lib:
        reasons = lib.devices()[0].read().throttle_reasons
    assert reasons == ["sw_power_cap", "board_limit", "reliability"]


def test_temperature_survives_the_deprecated_call_going_away(node):
    # CUDA 14 drivers drop nvmlDeviceGetTemperature (pynvml.py:3875).
    node(fgs.make_devices(1, "nvidia", temperature_c=61.0),
         removed_functions=["nvmlDeviceGetTemperature"])
    with NvidiaLibrary() as lib:
        assert lib.devices()[0].read().temperature_c == 61.0


def test_throttle_reasons_fall_back_on_drivers_before_r535(node):
    # pynvml 13 has the new name, the driver only the old symbol.
    node(fgs.make_devices(1, "nvidia", throttle_reasons=0x4),
         removed_functions=["nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"])
    with NvidiaLibrary() as lib:
        reading = lib.devices()[0].read()
    assert reading.throttle_reasons == ["sw_power_cap"]
    assert reading.temperature_c == 45.0  # the old temperature call, on the old driver


# ---- AMD ------------------------------------------------------------------------
@pytest.mark.parametrize("marker", [0xFFFF, 0xFFFFFFFF])
def test_amd_not_available_markers_of_both_rocm_generations(node, marker):
    # MI200 class: no current socket power, only the average.
    node(fgs.make_devices(1, "amd", na_fields=["current_socket_power", "gfx_activity"]),
         amd_na_value=marker)
    with AmdLibrary() as lib:
        reading = lib.devices()[0].read()
        fast = lib.devices()[0].read_power()
    assert reading.power_w == pytest.approx(700.0) and reading.power_source == "average"
    assert fast.power_w == pytest.approx(700.0) and fast.power_source == "average"
    assert reading.utilization_pct is None


def test_amd_energy_uses_the_hardware_resolution(node):
    # 1000 J on the counter; the library says 15.3 µJ a tick (0.27% high).
    node(fgs.make_devices(1, "amd", energy_mj=1_000_000.0, energy_frozen=True))
    with AmdLibrary() as lib:
        dev = lib.devices()[0]
        assert dev.energy_j() == pytest.approx(1000.0, rel=1e-4)
        assert dev.read_power().energy_j == pytest.approx(1000.0, rel=1e-4)


def test_amd_throttle_reasons_from_violation_status(node):
    path = node(fgs.make_devices(1, "amd", throttle_reasons=0x4))
    with AmdLibrary() as lib:
        dev = lib.devices()[0]
        assert dev.read().throttle_reasons == ["sw_power_cap"]
        fgs.update_device(path, 0, throttle_reasons=0)
        assert dev.read().throttle_reasons == []
        fgs.update_device(path, 0, not_supported=["violation"])
        assert dev.read().throttle_reasons is None  # unknown, not "never throttled"
        fgs.update_device(path, 0, not_supported=[], violation={"active_ppt_pwr": 255,
                                                                "active_socket_thrm": 255,
                                                                "active_prochot_thrm": 255,
                                                                "active_vr_thrm": 255,
                                                                "active_hbm_thrm": 255})
        assert dev.read().throttle_reasons is None  # UINT8_MAX: unsupported


def test_amd_gpus_carry_rocrs_uuid_form(node):
    devices = fgs.make_devices(2, "amd")
    node(devices)
    with AmdLibrary() as lib:
        infos = [d.info() for d in lib.devices()]
    assert infos[0].uuid == devices[0]["uuid"]
    assert infos[0].visible_id == "GPU-" + devices[0]["uuid"].replace("-", "")[:16]


def test_amd_per_metric_failure_keeps_the_reading(node):
    busy = 30  # AMDSMI_STATUS_BUSY
    node(fgs.make_devices(1, "amd", errors={"memory_used": busy, "utilization": busy}))
    with AmdLibrary() as lib:
        reading = lib.devices()[0].read()
    assert reading.power_w == pytest.approx(700.0) and reading.energy_j is not None
    assert reading.memory_used_bytes is None and reading.utilization_pct is None


def _rocm_tree(tmp_path, body: str):
    package = tmp_path / "rocm" / "share" / "amd_smi" / "amdsmi"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body)
    return tmp_path / "rocm"


def test_amdsmi_import_prints_nothing_and_info_json_stays_valid(tmp_path):
    from conftest import FAKES, LAUNCHER, ROOT

    # A FAKE of the package index's amdsmi, installed on a host without
    # libamd_smi.so: it prints on import, then fails (review note C1).
    site = tmp_path / "site" / "amdsmi"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("print('Unable to find libamd_smi.so')\nraise KeyError('libamd_smi.so')\n")
    env = {"PATH": "/usr/bin:/bin", "ROCM_PATH": str(tmp_path / "no-rocm"),
           "PYTHONPATH": f"{site.parent}:{FAKES / 'no_gpu'}", "HPCAI_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([*LAUNCHER, "info", "--json"], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # nothing else on stdout
    assert "Unable to find" not in done.stdout


def test_rocms_own_amdsmi_is_preferred_and_a_mismatch_is_one_line(tmp_path, monkeypatch):
    rocm = _rocm_tree(tmp_path, "raise AttributeError("
                                "'/opt/rocm/lib/libamd_smi.so: undefined symbol: amdsmi_get_gpu_enumeration_info')\n")
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(DeviceError) as info:
        AmdLibrary()
    line = info.value.one_line()
    assert "does not match this node's libamd_smi.so" in line and "share/amd_smi" in line
    assert "\n" not in line
    assert sys.path[0] == str(rocm / "share" / "amd_smi")


def test_the_amdsmi_in_use_says_whether_it_is_rocms_own(node, tmp_path, monkeypatch):
    node(fgs.make_devices(1, "amd"))
    rocm = _rocm_tree(tmp_path, "")
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    with AmdLibrary() as lib:  # the FAKE amdsmi, from tests/fakes, not ROCm's folder
        origin = lib.versions()["amdsmi_python"]
    assert "not ROCm's own" in origin and f"pip install {rocm / 'share' / 'amd_smi'}" in origin
