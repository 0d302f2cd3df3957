"""hpcai.gpu.amd against the fake amdsmi (tests/fakes/amdsmi.py)."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from hpcai.errors import CapOutOfRangeError, DeviceError, PowerPermissionError
from hpcai.gpu import open_library
from hpcai.gpu.amd import AmdLibrary

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(devices=None):
        path = tmp_path / "gpus.json"
        mods = fgs.install(monkeypatch, path, devices or fgs.make_devices(2, "amd"))
        make.amdsmi = mods["amdsmi"]
        return path

    return make


def test_info_and_reading_convert_units(node):
    state = node()
    with AmdLibrary() as lib:
        dev = lib.devices()[1]
        info = dev.info()
        r = dev.read()
    assert info.index == 1 and info.vendor == "amd"
    assert info.name == "AMD Instinct MI300X"
    assert info.uuid == fgs.read_state(state)["devices"][1]["uuid"]
    assert info.memory_total_bytes == 192 * 1024**3
    assert info.pci_bus_id == "0000:1c:00.0"
    assert r.power_w == 700.0 and r.power_source == "instant"
    assert r.power_limit_w == pytest.approx(750.0)  # 750e6 µW
    assert r.sm_clock_mhz == 2100.0 and r.memory_clock_mhz == 1300.0
    assert r.temperature_c == 45.0  # hotspot first
    assert r.utilization_pct == 0.0
    assert r.memory_used_bytes == 1024**3
    assert r.throttle_reasons == []


def test_caps_are_converted_from_microwatts(node):
    node(fgs.make_devices(1, "amd", min_limit_w=0.0, current_limit_w=400.0))
    with AmdLibrary() as lib:
        lim = lib.devices()[0].power_limits()
    assert (lim.min_w, lim.max_w, lim.default_w, lim.current_w) == (0.0, 750.0, 750.0, 400.0)
    assert lim.enforced_w == 400.0


def test_energy_is_counter_times_resolution_in_joules(node):
    node(fgs.make_devices(1, "amd", power_draw_w=600.0))
    with AmdLibrary() as lib:
        dev = lib.devices()[0]
        e0, t0 = dev.energy_j(), time.time()
        time.sleep(0.3)
        e1, t1 = dev.energy_j(), time.time()
    assert 0.5 * 600 * (t1 - t0) < e1 - e0 < 1.5 * 600 * (t1 - t0) + 5


def test_energy_under_the_legacy_key(node):
    node(fgs.make_devices(1, "amd", legacy_energy_key=True, power_draw_w=600.0))
    with AmdLibrary() as lib:
        dev = lib.devices()[0]
        e0 = dev.energy_j()
        time.sleep(0.2)
        assert e0 is not None and dev.energy_j() > e0


def test_current_power_na_falls_back_to_average(node):
    # MI200/MI210: current_socket_power is "N/A".
    node(fgs.make_devices(1, "amd", na_fields=["current_socket_power"], power_draw_w=321.0))
    with AmdLibrary() as lib:
        r = lib.devices()[0].read()
    assert r.power_w == 321.0 and r.power_source == "average"


def test_both_powers_na_gives_none(node):
    node(fgs.make_devices(1, "amd", na_fields=["current_socket_power", "average_socket_power"]))
    with AmdLibrary() as lib:
        r = lib.devices()[0].read()
    assert r.power_w is None and r.power_source is None


def test_legacy_clock_key(node):
    node(fgs.make_devices(1, "amd", legacy_clock_key=True))
    with AmdLibrary() as lib:
        r = lib.devices()[0].read()
    assert r.sm_clock_mhz == 2100.0 and r.memory_clock_mhz == 1300.0


def test_hotspot_unsupported_falls_back_to_edge(node):
    node(fgs.make_devices(1, "amd", not_supported=["temperature_hotspot"]))
    with AmdLibrary() as lib:
        assert lib.devices()[0].read().temperature_c == 40.0  # the fake's edge = hotspot - 5


def test_not_supported_fields_become_none(node):
    unsupported = ["energy", "temperature", "utilization", "sm_clock", "memory_clock", "memory_used", "power_cap_info"]
    node(fgs.make_devices(1, "amd", not_supported=unsupported))
    with AmdLibrary() as lib:
        r = lib.devices()[0].read()
    assert r.energy_j is None and r.temperature_c is None and r.utilization_pct is None
    assert r.sm_clock_mhz is None and r.memory_clock_mhz is None
    assert r.memory_used_bytes is None and r.power_limit_w is None
    assert r.power_w == 700.0


def test_devices_follow_hip_order(node):
    devices = fgs.make_devices(3, "amd")
    for dev, hip in zip(devices, (2, 0, 1)):
        dev["hip_id"] = hip
    node(devices)
    with AmdLibrary() as lib:
        uuids = [d.info().uuid for d in lib.devices()]
        indices = [d.info().index for d in lib.devices()]
    assert uuids == [devices[1]["uuid"], devices[2]["uuid"], devices[0]["uuid"]]
    assert indices == [0, 1, 2]


def test_enumeration_order_kept_without_hip_ids(node):
    devices = fgs.make_devices(2, "amd", hip_id=None)
    node(devices)
    with AmdLibrary() as lib:
        assert [d.info().uuid for d in lib.devices()] == [d["uuid"] for d in devices]


def test_set_power_cap_sends_integer_microwatts(node):
    path = node()
    with AmdLibrary() as lib:
        lib.devices()[0].set_power_limit_w(400.5)  # the fake rejects a non-int cap
    assert fgs.read_state(path)["devices"][0]["current_limit_w"] == pytest.approx(400.5)


def test_set_without_permission_maps_to_power_permission_error(node):
    path = node(fgs.make_devices(1, "amd", deny_set=True))
    with AmdLibrary() as lib, pytest.raises(PowerPermissionError) as info:
        lib.devices()[0].set_power_limit_w(400)
    assert "root" in info.value.hint
    assert fgs.read_state(path)["devices"][0]["current_limit_w"] == 750.0


def test_set_out_of_range_maps_to_cap_out_of_range(node):
    node()
    with AmdLibrary() as lib, pytest.raises(CapOutOfRangeError):
        lib.devices()[0].set_power_limit_w(900)


def test_calls_are_serialised_by_one_lock(node):
    node(fgs.make_devices(2, "amd"))
    node.amdsmi.CALL_DELAY_S = 0.002
    handle = None
    with AmdLibrary() as lib:
        devices = lib.devices()
        handle = devices[0]._handle

        # Control: calling the fake from threads without the lock does collide.
        collisions = []

        def raw():
            for _ in range(20):
                try:
                    node.amdsmi.amdsmi_get_gpu_activity(handle)
                except RuntimeError:
                    collisions.append(1)

        threads = [threading.Thread(target=raw) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert collisions, "the fake should detect concurrent calls"

        errors = []

        def sample(dev):
            try:
                for _ in range(5):
                    dev.read()
            except Exception as exc:  # noqa: BLE001 - collect for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=sample, args=(devices[i % 2],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_versions(node):
    node()
    with AmdLibrary() as lib:
        versions = lib.versions()
    assert {k: versions[k] for k in ("amdsmi", "driver")} == {"amdsmi": "25.3.0", "driver": "550.54.15"}
    assert "fakes/amdsmi.py" in versions["amdsmi_python"]  # the fake's file


def test_open_library_auto_finds_amd_when_nvml_has_no_driver(node):
    node()
    lib = open_library("auto")
    try:
        assert lib.vendor == "amd" and len(lib.devices()) == 2
    finally:
        lib.close()


def test_open_library_amd_without_gpus_raises(node):
    node(fgs.make_devices(1, "nvidia"))
    with pytest.raises(DeviceError, match="sees no GPU"):
        open_library("amd")


def test_open_library_amd_missing_raises_with_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(DeviceError) as info:
        open_library("amd")
    assert "share/amd_smi" in info.value.hint  # ROCm's own copy, not the package index's
