"""FAKE ``amdsmi`` (ROCm AMD SMI Python package) for tests: not AMD's library.

It implements, under the real names, only the subset of the module that
hpcai uses, so hpcai's AMD code runs unchanged against it. Device state lives
in the JSON file named by ``HPCAI_FAKE_GPU_STATE`` (schema in
``fake_gpu_state.py``); every call re-reads it. Units follow amdsmi: power
in whole watts or the string "N/A", caps in µW, energy as a counter times a
resolution in µJ, temperatures in °C, clocks in MHz.

The real library is not thread-safe before ROCm 7.2: this fake raises
``RuntimeError`` when two threads are inside it at once, so tests can check
that callers serialise. Set ``CALL_DELAY_S`` on the module to widen the window.
"""
from __future__ import annotations

import importlib.util
import threading
import time
from enum import IntEnum
from functools import wraps
from pathlib import Path
from types import SimpleNamespace

_spec = importlib.util.spec_from_file_location(
    "_hpcai_fake_gpu_state", Path(__file__).with_name("fake_gpu_state.py")
)
_fgs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fgs)

CALL_DELAY_S = 0.0
# The counter ticks in the hardware's unit, 2^-16 J = 15.2587890625 µJ (rocm-smi
# prints "energy_accumulator (15.259uJ (2^-16))"), but the library reports the
# rounded resolution rocm_smi hard-codes, kEnergyCounterResolution = 15.3F
# (rocm_smi.cc; seen as 15.3000001907 in AMDResearch/hpcfund#21).
HARDWARE_RESOLUTION_UJ = 1e6 / 65536
COUNTER_RESOLUTION_UJ = 15.3

# Calls made, by function name: the bench and the sampler-cost tests count them.
CALLS: dict[str, int] = {}

# Status codes; hpcai resolves them by name (values differ between releases).
amdsmi_wrapper = SimpleNamespace(
    AMDSMI_STATUS_SUCCESS=0,
    AMDSMI_STATUS_INVAL=1,
    AMDSMI_STATUS_NOT_SUPPORTED=2,
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED=3,
    AMDSMI_STATUS_NO_PERM=10,
    AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS=17,
    AMDSMI_STATUS_INIT_ERROR=18,
    AMDSMI_STATUS_NOT_FOUND=31,
    AMDSMI_STATUS_NO_DATA=40,
)


class AmdSmiRetCode(IntEnum):
    SUCCESS = 0
    STATUS_INVAL = 1
    STATUS_NOT_SUPPORTED = 2
    STATUS_NOT_YET_IMPLEMENTED = 3
    STATUS_NO_PERM = 10
    STATUS_INPUT_OUT_OF_BOUNDS = 17
    STATUS_INIT_ERROR = 18
    STATUS_NOT_FOUND = 31
    STATUS_NO_DATA = 40


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_GPUS = 1 << 1


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


class AmdSmiDevPerfLevel(IntEnum):
    # amdsmi_interface.py (7.0.2) maps these to amdsmi_wrapper.AMDSMI_DEV_PERF_LEVEL_*
    # (amdsmi.h: AUTO = 0 ... DETERMINISM, UNKNOWN = 0x100).
    AUTO = 0
    LOW = 1
    HIGH = 2
    MANUAL = 3
    STABLE_STD = 4
    STABLE_PEAK = 5
    STABLE_MIN_MCLK = 6
    STABLE_MIN_SCLK = 7
    DETERMINISM = 8
    UNKNOWN = 0x100


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiException(Exception):
    """Base of amdsmi errors."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code):
        err_code = abs(int(err_code))
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = {
            int(code): code.name for code in AmdSmiRetCode
        }.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")

    def __str__(self):
        return f"An error occured with code: {self.err_code}({self.err_info})"

    def get_error_code(self):
        return self.err_code


class AmdSmiParameterException(AmdSmiException):
    pass


# --- state access and the one-thread-at-a-time check ----------------------------
_busy = threading.Lock()
_initialised = 0


class _Handle:
    """Stands in for amdsmi_processor_handle; the position in the state file."""

    def __init__(self, position: int):
        self.position = position

    def __repr__(self):
        return f"<fake amdsmi processor {self.position}>"


def _exclusive(fn):
    @wraps(fn)
    def wrapper(*args, **kwargs):
        CALLS[fn.__name__] = CALLS.get(fn.__name__, 0) + 1
        if not _busy.acquire(blocking=False):
            raise RuntimeError(f"fake amdsmi: {fn.__name__} called while another thread is inside amdsmi")
        try:
            if CALL_DELAY_S:
                time.sleep(CALL_DELAY_S)
            return fn(*args, **kwargs)
        finally:
            _busy.release()

    return wrapper


def _path() -> str:
    path = _fgs.state_path()
    if not path or not Path(path).exists():
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INIT_ERROR)
    return path


def _amd(state: dict) -> list[dict]:
    return [d for d in state["devices"] if d.get("vendor") == "amd"]


def _state() -> dict:
    if _initialised <= 0:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INIT_ERROR)
    return _fgs.read_state(_path())


def _dev(handle, feature: str | None = None) -> dict:
    if not isinstance(handle, _Handle):
        raise AmdSmiParameterException(f"not a processor handle: {handle!r}")
    dev = _amd(_state())[handle.position]
    if feature and feature in dev.get("not_supported", []):
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    if feature and feature in dev.get("errors", {}):
        # e.g. AMDSMI_STATUS_BUSY (30), RETRY (9) on a single query (amdsmi_wrapper.py)
        raise AmdSmiLibraryException(int(dev["errors"][feature]))
    return dev


def _na() -> object:
    """How an unsupported value arrives. amdsmi 7.0.2 maps only 0xFFFF to "N/A"
    (amdsmi_interface.py:2913 power_info, :2343 gpu_activity); ROCm 7.1's
    library sets "unsupported struct members ... to UINT32_MAX" (7.1.1 docs),
    which that wrapper passes through as 4294967295."""
    return _state().get("amd_na_value", "N/A")


def _uw(watts: float) -> int:
    return int(round(watts * 1_000_000))


# --- library ---------------------------------------------------------------------
@_exclusive
def amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS):
    global _initialised
    _fgs.read_state(_path())
    _initialised += 1


@_exclusive
def amdsmi_shut_down():
    global _initialised
    _initialised = max(0, _initialised - 1)


@_exclusive
def amdsmi_get_lib_version():
    major, minor, release = _state()["amdsmi_version"]
    return {"major": major, "minor": minor, "release": release, "build": "fake"}


@_exclusive
def amdsmi_get_processor_handles():
    return [_Handle(i) for i in range(len(_amd(_state())))]


@_exclusive
def amdsmi_get_gpu_enumeration_info(handle):
    dev = _dev(handle)
    if dev.get("hip_id") is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return {
        "drm_render": 128 + handle.position,
        "drm_card": handle.position,
        "hsa_id": 10 + handle.position,
        "hip_id": dev["hip_id"],
        # ROCr's form, not amdsmi's: `amd-smi list -e` shows both, UUID
        # "XXXXXXXX-XXXX-..." and HIP_UUID "GPU-XXXXXXXXXXXXXXXX" (ROCm 6.4 changelog).
        "hip_uuid": "GPU-" + dev["uuid"].replace("-", "")[:16],
    }


@_exclusive
def amdsmi_get_gpu_asic_info(handle):
    dev = _dev(handle)
    return {
        "market_name": dev["name"],
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "device_id": "0x74a1",
        "rev_id": "0x00",
        # The ASIC's serial number (amdsmi_asic_info_t.asic_serial, AMD SMI docs
        # "ASIC & Board Static Information"; amdsmi_interface.py decodes the C
        # string). A part that cannot say: "serial" in not_supported -> N/A.
        "asic_serial": (_na() if "serial" in dev.get("not_supported", []) or not dev.get("serial")
                        else dev["serial"]),
        "oam_id": handle.position,
        "num_compute_units": 304,
        "target_graphics_version": "gfx942",
    }


@_exclusive
def amdsmi_get_gpu_device_uuid(handle):
    return _dev(handle)["uuid"]


@_exclusive
def amdsmi_get_gpu_device_bdf(handle):
    return _dev(handle)["pci_bus_id"]


@_exclusive
def amdsmi_get_gpu_driver_info(handle):
    return {"driver_name": "amdgpu", "driver_version": _state()["driver_version"], "driver_date": "N/A"}


@_exclusive
def amdsmi_get_gpu_memory_total(handle, mem_type):
    return int(_dev(handle)["memory_total_bytes"])


@_exclusive
def amdsmi_get_gpu_memory_usage(handle, mem_type):
    return int(_dev(handle, "memory_used")["memory_used_bytes"])


# --- telemetry -----------------------------------------------------------------------
@_exclusive
def amdsmi_get_power_info(handle, sensor_ind=0):
    dev = _dev(handle)
    watts = int(round(_fgs.reported_power_w(dev)))
    info = {
        "current_socket_power": watts,
        "average_socket_power": watts,
        "gfx_voltage": 800,
        "soc_voltage": 900,
        "mem_voltage": 1100,
        "power_limit": int(dev["current_limit_w"]),
    }
    for key in dev.get("na_fields", []):
        info[key] = _na()
    return info


@_exclusive
def amdsmi_get_energy_count(handle):
    dev = _dev(handle, "energy")
    ticks = int(_fgs.energy_mj(dev) * 1000.0 / HARDWARE_RESOLUTION_UJ)
    key = "power" if dev.get("legacy_energy_key") else "energy_accumulator"
    return {key: ticks, "counter_resolution": COUNTER_RESOLUTION_UJ, "timestamp": time.time_ns()}


@_exclusive
def amdsmi_get_clock_info(handle, clock_type):
    if clock_type == AmdSmiClkType.MEM:
        mhz = _dev(handle, "memory_clock")["memory_clock_mhz"]
    else:
        mhz = _dev(handle, "sm_clock")["sm_clock_mhz"]
    dev = _dev(handle)
    domain = "mem" if clock_type == AmdSmiClkType.MEM else "sm"
    key = "cur_clk" if dev.get("legacy_clock_key") else "clk"
    # min_clk/max_clk: the range in force (smi_amdgpu_get_ranges over pp_dpm_*,
    # amd_smi.cc amdsmi_get_clock_info); the clock runs at most at its maximum.
    low, high = _clock_range(dev, domain)
    return {key: int(min(mhz, high)), "min_clk": low, "max_clk": high, "clk_locked": False,
            "clk_deep_sleep": False}


def _levels(dev, domain):
    return dev.get("sm_clock_levels_mhz" if domain == "sm" else "mem_clock_levels_mhz") or [500, 2100]


def _clock_info_mhz(dev, domain):
    return min(dev["sm_clock_mhz" if domain == "sm" else "memory_clock_mhz"],
               _clock_range(dev, domain)[1])


def _clock_range(dev, domain):
    limit = (dev.get("clock_limits") or {}).get(domain)
    levels = _levels(dev, domain)
    return (int(limit[0]), int(limit[1])) if limit else (int(min(levels)), int(max(levels)))


@_exclusive
def amdsmi_get_clk_freq(handle, clk_type):
    # amdsmi_interface.py:4537 (7.0.2): the DPM levels, in Hz (rocm_smi.py prints
    # frequency / 1000000 as MHz).
    domain = "mem" if clk_type == AmdSmiClkType.MEM else "sm"
    levels = _levels(_dev(handle, "supported_clocks"), domain)
    return {"num_supported": len(levels), "current": len(levels) - 1,
            "frequency": [int(mhz * 1_000_000) for mhz in levels]}


@_exclusive
def amdsmi_set_gpu_clk_limit(handle, clk_type, limit_type, value):
    # amdsmi_interface.py:4175-4204 (7.0.2): clk_type "sclk"|"mclk", limit_type
    # "min"|"max" (strings), value an int in MHz, else AmdSmiParameterException.
    if not isinstance(value, int):
        raise AmdSmiParameterException(f"value must be int, got {type(value).__name__}")
    domain = {"sclk": "sm", "mclk": "mem"}[clk_type.lower()]
    side = {"min": 0, "max": 1}[limit_type.lower()]
    _dev(handle, "clock_lock")
    position = handle.position

    def apply(state):
        dev = _amd(state)[position]
        entry = {"domain": domain, "action": limit_type.lower(), "mhz": value, "t": time.time()}
        dev.setdefault("clock_log", []).append(entry)
        if dev.get("deny_set"):  # writing pp_od_clk_voltage needs root
            entry["result"] = "denied"
            return amdsmi_wrapper.AMDSMI_STATUS_NO_PERM
        levels = _levels(dev, domain)
        if not min(levels) <= value <= max(levels):
            entry["result"] = "invalid"
            return amdsmi_wrapper.AMDSMI_STATUS_INVAL
        if dev.get("ignore_clock_set"):
            entry["result"] = "ignored"
            return amdsmi_wrapper.AMDSMI_STATUS_SUCCESS
        low, high = _clock_range(dev, domain)
        pair = [low, high]
        pair[side] = value
        if pair[0] > pair[1]:
            entry["result"] = "invalid"
            return amdsmi_wrapper.AMDSMI_STATUS_INVAL
        limits = dict(dev.get("clock_limits") or {})
        limits[domain] = pair
        dev["clock_limits"] = limits
        entry["result"] = "ok"
        return amdsmi_wrapper.AMDSMI_STATUS_SUCCESS

    _state()
    status = _fgs.modify(_path(), apply)
    if status != amdsmi_wrapper.AMDSMI_STATUS_SUCCESS:
        raise AmdSmiLibraryException(status)


@_exclusive
def amdsmi_get_temp_metric(handle, sensor_type, metric):
    dev = _dev(handle, "temperature")
    if sensor_type == AmdSmiTemperatureType.HOTSPOT:
        if "temperature_hotspot" in dev.get("not_supported", []):
            raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
        return int(dev["temperature_c"])
    return int(dev["temperature_c"]) - 5  # edge runs cooler than the hotspot


@_exclusive
def amdsmi_get_gpu_activity(handle):
    dev = _dev(handle, "utilization")
    gfx = _na() if "gfx_activity" in dev.get("na_fields", []) else int(dev["utilization_pct"])
    return {"gfx_activity": gfx, "umc_activity": 0, "mm_activity": "N/A"}


@_exclusive
def amdsmi_get_violation_status(handle):
    """Exported in amdsmi 7.0.2; active_* are 1 (active) / 0, UINT8_MAX when
    unsupported (amdsmi.h amdsmi_violation_status_t). PVIOL = active_ppt_pwr,
    TVIOL = active_socket_thrm ("Added TVIOL_ACTIVE", ROCm 6.4). Derived here
    from the NVML-style throttle mask: 0x4 power cap, 0x20 thermal, 0x40 prochot."""
    dev = _dev(handle, "violation")
    mask = int(dev.get("throttle_reasons", 0))
    status = {
        "active_prochot_thrm": int(bool(mask & 0x40)),
        "active_ppt_pwr": int(bool(mask & 0x4)),
        "active_socket_thrm": int(bool(mask & 0x20)),
        "active_vr_thrm": 0,
        "active_hbm_thrm": 0,
        "per_ppt_pwr": 100 if mask & 0x4 else 0,
        "per_socket_thrm": 100 if mask & 0x20 else 0,
    }
    status.update(dev.get("violation", {}))
    return status


@_exclusive
def amdsmi_get_gpu_metrics_info(handle):
    """The GPU metrics table (one read of the kernel's gpu_metrics file):
    current_socket_power in W, energy_accumulator in the hardware's 15.259 µJ
    ticks, temperatures in °C, clocks in MHz (amdsmi_interface.py
    amdsmi_get_gpu_metrics_info; unsupported members read "N/A")."""
    dev = _dev(handle, "gpu_metrics")
    watts = int(round(_fgs.reported_power_w(dev)))
    table = {
        "current_socket_power": watts,
        "average_socket_power": watts,
        "energy_accumulator": int(_fgs.energy_mj(dev) * 1000.0 / HARDWARE_RESOLUTION_UJ),
        "temperature_hotspot": int(dev["temperature_c"]),
        "temperature_edge": int(dev["temperature_c"]) - 5,
        "average_gfx_activity": int(dev["utilization_pct"]),
        "current_gfxclk": int(_clock_info_mhz(dev, "sm")),
        "current_uclk": int(_clock_info_mhz(dev, "mem")),
    }
    for key in dev.get("na_fields", []):
        if key in table:
            table[key] = _na()
    if "energy" in dev.get("not_supported", []):
        table["energy_accumulator"] = "N/A"
    return table


# --- power caps (µW) --------------------------------------------------------------------
@_exclusive
def amdsmi_get_power_cap_info(handle, sensor_ind=0):
    dev = _dev(handle, "power_cap_info")
    return {
        "power_cap": _uw(dev["current_limit_w"]),
        "default_power_cap": _uw(dev["default_limit_w"]),
        "dpm_cap": 0,
        "min_power_cap": _uw(dev["min_limit_w"]),
        "max_power_cap": _uw(dev["max_limit_w"]),
    }


@_exclusive
def amdsmi_set_power_cap(handle, sensor_ind, cap):
    if not isinstance(cap, int):
        raise AmdSmiParameterException(f"cap must be int, got {type(cap).__name__}")
    _dev(handle, "set_limit")
    position = handle.position
    watts = cap / 1_000_000

    def apply(state):
        dev = _amd(state)[position]
        entry = {"watts": watts, "t": time.time()}
        dev.setdefault("set_log", []).append(entry)
        if dev.get("deny_set"):
            entry["result"] = "denied"
            return amdsmi_wrapper.AMDSMI_STATUS_NO_PERM
        if not dev["min_limit_w"] <= watts <= dev["max_limit_w"]:
            entry["result"] = "invalid"
            return amdsmi_wrapper.AMDSMI_STATUS_INVAL
        if dev.get("ignore_set"):
            entry["result"] = "ignored"
            return amdsmi_wrapper.AMDSMI_STATUS_SUCCESS
        _fgs.fold_energy(dev)
        dev["current_limit_w"] = watts
        entry["result"] = "ok"
        return amdsmi_wrapper.AMDSMI_STATUS_SUCCESS

    _state()
    status = _fgs.modify(_path(), apply)
    if status != amdsmi_wrapper.AMDSMI_STATUS_SUCCESS:
        raise AmdSmiLibraryException(status)


# --- performance level and determinism (amdsmi_interface.py, 7.0.2) ------------------
# amdsmi_get_gpu_perf_level returns the level's name ("AMDSMI_DEV_PERF_LEVEL_AUTO");
# amdsmi_set_gpu_perf_level takes an AmdSmiDevPerfLevel, else AmdSmiParameterException;
# amdsmi_set_gpu_perf_determinism_mode(handle, clkvalue) takes an int (MHz), else
# AmdSmiParameterException, and puts the GPU in DETERMINISM with that GFX soft
# maximum. Writing the level needs root (NO_PERM, "deny_set"); a board without it:
# feature "perf_determinism" (set) or "perf_level" (get and set) -> NOT_SUPPORTED.
@_exclusive
def amdsmi_get_gpu_perf_level(handle):
    return "AMDSMI_DEV_PERF_LEVEL_" + _dev(handle, "perf_level").get("perf_level", "AUTO")


def _set_level(handle, feature: str, level: str, mhz: int | None):
    _dev(handle, feature)
    position = handle.position

    def apply(state):
        dev = _amd(state)[position]
        entry = {"level": level, "mhz": mhz, "t": time.time()}
        dev.setdefault("perf_log", []).append(entry)
        if dev.get("deny_set"):
            entry["result"] = "denied"
            return amdsmi_wrapper.AMDSMI_STATUS_NO_PERM
        if mhz is not None and not min(_levels(dev, "sm")) <= mhz <= max(_levels(dev, "sm")):
            entry["result"] = "invalid"
            return amdsmi_wrapper.AMDSMI_STATUS_INVAL
        if dev.get("ignore_perf_set"):
            entry["result"] = "ignored"
            return amdsmi_wrapper.AMDSMI_STATUS_SUCCESS
        dev["perf_level"], dev["determinism_mhz"] = level, mhz
        entry["result"] = "ok"
        return amdsmi_wrapper.AMDSMI_STATUS_SUCCESS

    status = _fgs.modify(_path(), apply)
    if status != amdsmi_wrapper.AMDSMI_STATUS_SUCCESS:
        raise AmdSmiLibraryException(status)


@_exclusive
def amdsmi_set_gpu_perf_level(handle, perf_level):
    if not isinstance(perf_level, AmdSmiDevPerfLevel):
        raise AmdSmiParameterException(f"perf_level must be AmdSmiDevPerfLevel, got {perf_level!r}")
    _dev(handle, "perf_level")
    _set_level(handle, "perf_level", perf_level.name, None)


@_exclusive
def amdsmi_set_gpu_perf_determinism_mode(handle, clkvalue):
    if not isinstance(clkvalue, int):
        raise AmdSmiParameterException(f"clkvalue must be int, got {type(clkvalue).__name__}")
    _dev(handle, "perf_level")
    _set_level(handle, "perf_determinism", "DETERMINISM", clkvalue)
