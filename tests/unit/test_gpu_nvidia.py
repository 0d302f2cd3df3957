"""hpcai.gpu.nvidia against the fake pynvml (tests/fakes/pynvml.py)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from hpcai.errors import CapOutOfRangeError, DeviceError, PowerError, PowerPermissionError, UsageError
from hpcai.gpu import detect_vendor, open_library
from hpcai.gpu.nvidia import NvidiaLibrary, decode_throttle_reasons

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Install the fakes; node(devices) writes the state and returns its path."""

    def make(devices=None):
        path = tmp_path / "gpus.json"
        mods = fgs.install(monkeypatch, path, devices or fgs.make_devices(2, "nvidia"))
        make.pynvml = mods["pynvml"]
        return path

    return make


def _lib():
    lib = NvidiaLibrary()
    return lib


def test_info_and_reading_convert_units(node):
    state = node()
    with _lib() as lib:
        dev = lib.devices()[1]
        info = dev.info()
        assert info.index == 1 and info.vendor == "nvidia"
        assert info.name == "NVIDIA H100 80GB HBM3"
        assert info.uuid == fgs.read_state(state)["devices"][1]["uuid"]
        assert info.memory_total_bytes == 80 * 1024**3
        assert info.pci_bus_id == "00000000:28:00.0"
        r = dev.read()
    assert r.power_w == pytest.approx(650.0)  # 650000 mW
    assert r.power_source == "instant"
    assert r.power_limit_w == pytest.approx(700.0)
    assert r.sm_clock_mhz == 1980.0 and r.memory_clock_mhz == 2619.0
    assert r.temperature_c == 45.0 and r.utilization_pct == 0.0
    assert r.memory_used_bytes == 1024**3
    assert r.energy_j is not None and r.energy_j >= 0
    assert r.throttle_reasons == []


def test_power_limits_in_watts(node):
    node(fgs.make_devices(1, "nvidia", min_limit_w=150.0, current_limit_w=450.5))
    with _lib() as lib:
        lim = lib.devices()[0].power_limits()
    assert (lim.min_w, lim.max_w, lim.default_w) == (150.0, 700.0, 700.0)
    assert lim.current_w == pytest.approx(450.5)
    assert lim.enforced_w == pytest.approx(450.5)


def test_energy_counter_is_joules_and_grows_with_power(node):
    node(fgs.make_devices(1, "nvidia", power_draw_w=500.0))
    with _lib() as lib:
        dev = lib.devices()[0]
        e0, t0 = dev.energy_j(), time.time()
        time.sleep(0.3)
        e1, t1 = dev.energy_j(), time.time()
    # 500 W for ~0.3 s is ~150 J; mJ read as J would be 1000x off.
    assert 0.5 * 500 * (t1 - t0) < e1 - e0 < 1.5 * 500 * (t1 - t0) + 5


def test_reported_power_follows_the_cap(node):
    node(fgs.make_devices(1, "nvidia", power_draw_w=650.0))
    with _lib() as lib:
        dev = lib.devices()[0]
        dev.set_power_limit_w(300)
        assert dev.read().power_w == pytest.approx(300.0)
        assert dev.read().power_limit_w == pytest.approx(300.0)


def test_falls_back_to_average_power_when_instant_unsupported(node):
    node(fgs.make_devices(1, "nvidia", not_supported=["power_instant"]))
    with _lib() as lib:
        r = lib.devices()[0].read()
    assert r.power_w == pytest.approx(650.0)
    assert r.power_source == "average"


def test_no_power_at_all_gives_none(node):
    node(fgs.make_devices(1, "nvidia", not_supported=["power_instant", "power_average"]))
    with _lib() as lib:
        r = lib.devices()[0].read()
    assert r.power_w is None and r.power_source is None


def test_not_supported_fields_become_none(node):
    unsupported = ["energy", "temperature", "utilization", "sm_clock", "memory_clock", "throttle", "memory_used", "enforced_limit"]
    node(fgs.make_devices(1, "nvidia", not_supported=unsupported))
    with _lib() as lib:
        dev = lib.devices()[0]
        r = dev.read()
        lim = dev.power_limits()
        assert dev.energy_j() is None
    assert r.energy_j is None
    assert r.temperature_c is None and r.utilization_pct is None
    assert r.sm_clock_mhz is None and r.memory_clock_mhz is None
    assert r.memory_used_bytes is None and r.power_limit_w is None
    assert r.throttle_reasons is None  # unknown, not "never throttled"
    assert r.power_w == pytest.approx(650.0)  # what is supported still reads
    assert lim.enforced_w is None and lim.current_w == pytest.approx(700.0)


def test_reading_fails_only_when_power_and_energy_both_fail(node):
    path = node()
    lost = node.pynvml.NVML_ERROR_GPU_IS_LOST
    with _lib() as lib:
        dev = lib.devices()[0]
        assert dev.read().power_w is not None
        fgs.update_device(path, 0, errors={"field_values": lost, "power_average": lost, "energy": lost})
        with pytest.raises(DeviceError, match="GPU 0"):
            dev.read()
        with pytest.raises(DeviceError, match="GPU 0"):
            dev.read_power()


def test_throttle_reasons_decoded(node):
    node(fgs.make_devices(1, "nvidia", throttle_reasons=0x1 | 0x4 | 0x40))
    with _lib() as lib:
        assert lib.devices()[0].read().throttle_reasons == ["gpu_idle", "sw_power_cap", "hw_thermal"]


def test_throttle_reasons_fall_back_to_old_function_name(node, monkeypatch):
    node(fgs.make_devices(1, "nvidia", throttle_reasons=0x8 | 0x80))
    monkeypatch.delattr(node.pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
    with _lib() as lib:
        assert lib.devices()[0].read().throttle_reasons == ["hw_slowdown", "hw_power_brake"]


def test_decode_throttle_all_names_and_unknown_bits():
    names = decode_throttle_reasons(0x1FF | 0x10000)
    assert names[:8] == [
        "gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown",
        "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake",
    ]
    assert names[-1] == "unknown_0x10000"


def test_set_power_limit_sends_milliwatts(node):
    path = node()
    with _lib() as lib:
        lib.devices()[1].set_power_limit_w(312.5)
    dev = fgs.read_state(path)["devices"][1]
    assert dev["current_limit_w"] == pytest.approx(312.5)
    assert dev["set_log"][-1]["watts"] == pytest.approx(312.5)
    assert fgs.read_state(path)["devices"][0]["current_limit_w"] == 700.0


def test_set_without_permission_maps_to_power_permission_error(node):
    path = node(fgs.make_devices(1, "nvidia", deny_set=True))
    with _lib() as lib, pytest.raises(PowerPermissionError) as info:
        lib.devices()[0].set_power_limit_w(300)
    assert "root" in info.value.hint and "command" in info.value.hint
    assert fgs.read_state(path)["devices"][0]["current_limit_w"] == 700.0


def test_set_out_of_range_maps_to_cap_out_of_range(node):
    node()
    with _lib() as lib, pytest.raises(CapOutOfRangeError):
        lib.devices()[0].set_power_limit_w(100)


def test_set_not_supported_maps_to_power_error(node):
    node(fgs.make_devices(1, "nvidia", not_supported=["set_limit"]))
    with _lib() as lib, pytest.raises(PowerError) as info:
        lib.devices()[0].set_power_limit_w(300)
    assert not isinstance(info.value, PowerPermissionError)
    assert "does not support" in info.value.message


def test_versions(node):
    node()
    with _lib() as lib:
        assert lib.versions() == {"driver": "550.54.15", "nvml": "12.550.54.15", "cuda_driver": "12.4"}


def test_open_library_auto_finds_nvidia(node):
    node()
    lib = open_library("auto")
    try:
        assert lib is not None and lib.vendor == "nvidia" and len(lib.devices()) == 2
    finally:
        lib.close()
    assert detect_vendor() == "nvidia"


def test_open_library_auto_without_gpus_is_none(tmp_path, monkeypatch):
    for name in ("pynvml", "amdsmi"):
        monkeypatch.setitem(sys.modules, name, fgs.load_fake_module(name))
    monkeypatch.setenv(fgs.ENV, str(tmp_path / "absent.json"))
    assert open_library("auto") is None
    assert detect_vendor() is None


def test_open_library_named_vendor_missing_raises_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(DeviceError) as info:
        open_library("nvidia")
    assert "nvidia-ml-py" in info.value.hint and "pip install '.[nvidia]'" in info.value.hint


def test_open_library_named_vendor_init_failure_raises(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fgs.load_fake_module("pynvml"))
    monkeypatch.setenv(fgs.ENV, str(tmp_path / "absent.json"))
    with pytest.raises(DeviceError, match="NVML failed to initialise"):
        open_library("nvidia")


def test_open_library_rejects_unknown_vendor():
    with pytest.raises(UsageError):
        open_library("intel")


def test_importing_hpcai_gpu_imports_no_vendor_library():
    code = (
        "import sys, hpcai.gpu, hpcai.gpu.nvidia, hpcai.gpu.amd, hpcai.launcher.power; "
        "print(sorted(m for m in ('pynvml', 'amdsmi', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
