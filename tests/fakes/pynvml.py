"""FAKE ``pynvml`` (nvidia-ml-py) for tests: not NVIDIA's library.

It implements, under the real names, only the subset of the module that
hpcai uses, so hpcai's NVML code runs unchanged against it. Device state lives
in the JSON file named by ``HPCAI_FAKE_GPU_STATE`` (schema in
``fake_gpu_state.py``); every call re-reads it, so several processes share one
simulated node. Units follow NVML: power and limits in mW, energy in mJ.

Put this folder first on ``PYTHONPATH`` (subprocesses) or install the module
object with ``monkeypatch.setitem(sys.modules, "pynvml", ...)`` (in-process).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import random
import time
from pathlib import Path
from types import SimpleNamespace

_spec = importlib.util.spec_from_file_location(
    "_hpcai_fake_gpu_state", Path(__file__).with_name("fake_gpu_state.py")
)
_fgs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fgs)

# --- constants (values as in nvidia-ml-py) ---------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4

NVML_FI_DEV_POWER_INSTANT = 186

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1  # nvidia-ml-py 13.615.71 pynvml.py:2795
nvmlTemperature_v1 = 0x100000C  # pynvml.py:3858

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonApplicationsClocksSetting = 0x2
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSyncBoost = 0x10
nvmlClocksEventReasonSwThermalSlowdown = 0x20
nvmlClocksEventReasonHwThermalSlowdown = 0x40
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
nvmlClocksEventReasonDisplayClockSetting = 0x100
# Newer drivers also report these (pynvml.py:2225-2226, the ThrottleReason names).
nvmlClocksThrottleReasonBoardLimit = 0x200
nvmlClocksThrottleReasonReliability = 0x400


# --- errors: NVMLError(value) returns the matching subclass, as in pynvml ---
class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def _error_class(name: str, value: int) -> type:
    # Like pynvml's generated subclasses: constructible with or without the code.
    def __new__(cls, *args):
        return NVMLError.__new__(cls, value)

    def __init__(self, *args):
        NVMLError.__init__(self, value)

    cls = type(name, (NVMLError,), {"__new__": __new__, "__init__": __init__})
    NVMLError._valClassMapping[value] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_Timeout = _error_class("NVMLError_Timeout", NVML_ERROR_TIMEOUT)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


# --- state access ------------------------------------------------------------
_init_count = 0


class _Handle:
    """Stands in for c_nvmlDevice_t; the index selects the device in the state.
    mig: the position of a MIG device inside its parent (None: the whole GPU)."""

    def __init__(self, index: int, mig: int | None = None):
        self.index = index
        self.mig = mig

    def __repr__(self):
        return f"<fake nvmlDevice {self.index}{'' if self.mig is None else f' MIG {self.mig}'}>"


# Calls made, by function name: the bench and the sampler-cost tests count them.
CALLS: dict[str, int] = {}

# Errors per metric beside NotSupported: a device's "errors" maps a feature name
# (see fake_gpu_state) to an NVML return code. The real library returns
# NoPermission for nvmlDeviceGetMemoryInfo inside MIG containers
# (NVIDIA/nvidia-container-toolkit#842) and TIMEOUT / GPU_IS_LOST / UNKNOWN
# on single queries (NVML API reference, "Return values" of each query).


def _path() -> str:
    path = _fgs.state_path()
    if not path or not os.path.exists(path):
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    return path


def _nvidia(state: dict) -> list[dict]:
    return [d for d in state["devices"] if d.get("vendor", "nvidia") == "nvidia"]


def _state() -> dict:
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _fgs.read_state(_path())


def _dev(handle: _Handle, feature: str | None = None) -> dict:
    state = _state()
    devices = _nvidia(state)
    if not isinstance(handle, _Handle) or handle.index >= len(devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    dev = devices[handle.index]
    # A GPU lost after its handle was taken: every call on it returns
    # NVML_ERROR_GPU_IS_LOST ("if the target GPU has fallen off the bus or is
    # otherwise inaccessible", the Return values of each nvmlDevice* query and set).
    if dev.get("inaccessible") == "gpu_is_lost":
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if feature and feature in dev.get("not_supported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if feature and feature in dev.get("errors", {}):
        raise NVMLError(int(dev["errors"][feature]))
    # Intermittent failures: this share of calls fails with NVML_ERROR_UNKNOWN, which
    # any query may return ("NVML_ERROR_UNKNOWN on any unexpected error", the Return
    # values of e.g. nvmlDeviceGetPowerUsage in the NVML API reference): lost samples.
    share = dev.get("error_fraction", {}).get(feature) if feature else None
    if share and random.random() < float(share):
        raise NVMLError(NVML_ERROR_UNKNOWN)
    return dev


def _present(name: str) -> None:
    """A symbol the driver no longer exports: the real binding raises
    FunctionNotFound from _nvmlGetFunctionPointer (pynvml.py, e.g. 3878 for the
    deprecated nvmlDeviceGetTemperature, "will be removed in CUDA 14.0")."""
    if name in _state().get("removed_functions", []):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


# --- library -------------------------------------------------------------------
def nvmlInit():
    global _init_count
    state = _fgs.read_state(_path())
    if not _nvidia(state):
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)  # an AMD node: no NVIDIA driver
    _init_count += 1


def nvmlShutdown():
    global _init_count
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _init_count -= 1


def nvmlSystemGetDriverVersion():
    return _state()["driver_version"]


def nvmlSystemGetNVMLVersion():
    return _state()["nvml_version"]


def nvmlSystemGetCudaDriverVersion():
    return _state()["cuda_driver_version"]


def nvmlSystemGetCudaDriverVersion_v2():
    return _state()["cuda_driver_version"]


def nvmlDeviceGetCount():
    # Counts every GPU of the node, also those this process may not open:
    # nvmlDeviceGetCount_v2 "returns count of all devices in the system even if
    # nvmlDeviceGetHandleByIndex_v2 returns NVML_ERROR_NO_PERMISSION for such
    # device" (NVML API reference; pynvml.py:3372-3377 calls the _v2 symbol).
    return len(_nvidia(_state()))


def nvmlDeviceGetHandleByIndex(index):
    devices = _nvidia(_state())
    if index < 0 or index >= len(devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    # A GPU outside the job's cgroup: "nvml: Insufficient Permissions"
    # (NVIDIA/nvidia-docker#393); another tenant's failed GPU: GPU_IS_LOST.
    denied = devices[index].get("inaccessible")
    if denied:
        raise NVMLError({"no_permission": NVML_ERROR_NO_PERMISSION,
                         "gpu_is_lost": NVML_ERROR_GPU_IS_LOST}[denied])
    return _Handle(index)


# --- MIG (nvidia-ml-py 13.615.71 pynvml.py:6089-6289) ------------------------------
def nvmlDeviceGetMigMode(device):
    mig = _dev(device, "mig").get("mig")
    mode = NVML_DEVICE_MIG_ENABLE if mig else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]  # [current, pending]


def nvmlDeviceGetMaxMigDeviceCount(device):
    mig = _dev(device, "mig").get("mig")
    return 7 if mig else 0  # H100: up to 7 instances


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    slices = _dev(device, "mig").get("mig") or []
    if index >= len(slices):
        raise NVMLError(NVML_ERROR_NOT_FOUND)  # an empty slot of the max count
    return _Handle(device.index, mig=index)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice):
    return _Handle(migDevice.index)


# --- identity ------------------------------------------------------------------
def nvmlDeviceGetName(handle):
    return _dev(handle)["name"]


def nvmlDeviceGetUUID(handle):
    dev = _dev(handle)
    if handle.mig is not None:
        return dev["mig"][handle.mig]  # "MIG-<uuid>"
    return dev["uuid"]


def nvmlDeviceGetSerial(handle):
    # "Retrieves the globally unique board serial number ... the same as the serial
    # number printed on the board. For all products with an inforom." (NVML API
    # reference, Device Queries). Parts without one (GeForce) raise NotSupported:
    # "serial" in not_supported. pynvml returns str (nvidia-ml-py decodes it).
    serial = _dev(handle, "serial").get("serial")
    if serial is None:  # a hand-written state without one: as a part without an inforom
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return serial


def nvmlDeviceGetPciInfo(handle):
    return SimpleNamespace(busId=_dev(handle)["pci_bus_id"])


def nvmlDeviceGetMemoryInfo(handle, version=None):
    dev = _dev(handle)
    total = dev["memory_total_bytes"]
    used = dev["memory_used_bytes"]
    if "memory_used" in dev.get("not_supported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if "memory_used" in dev.get("errors", {}):
        raise NVMLError(int(dev["errors"]["memory_used"]))
    return SimpleNamespace(total=total, used=used, free=total - used)


# --- telemetry -------------------------------------------------------------------
def nvmlDeviceGetFieldValues(handle, fieldIds):
    dev = _dev(handle, "field_values")
    out = []
    for field in fieldIds:
        value = SimpleNamespace(dVal=0.0, uiVal=0, ulVal=0, ullVal=0, sllVal=0, siVal=0, usVal=0)
        entry = SimpleNamespace(
            fieldId=field,
            scopeId=0,
            timestamp=int(time.time() * 1e6),
            latencyUsec=0,
            valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
            nvmlReturn=NVML_SUCCESS,
            value=value,
        )
        if field != NVML_FI_DEV_POWER_INSTANT or "power_instant" in dev.get("not_supported", []):
            entry.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        else:
            value.uiVal = int(round(_fgs.instant_power_w(dev) * 1000))
        out.append(entry)
    return out


def nvmlDeviceGetPowerUsage(handle):
    return int(round(_fgs.reported_power_w(_dev(handle, "power_average")) * 1000))


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return int(_fgs.energy_mj(_dev(handle, "energy")))


def nvmlDeviceGetClockInfo(handle, type):
    # Under locked clocks the GPU runs at most at the locked maximum.
    if type == NVML_CLOCK_MEM:
        return int(_fgs.clock_mhz(_dev(handle, "memory_clock"), "mem"))
    return int(_fgs.clock_mhz(_dev(handle, "sm_clock"), "sm"))


# --- clocks (nvidia-ml-py 13.615.71 pynvml.py:3682-3773, 4466-4488) ----------------
# NVML has no getter for a locked range: only the clock now (above) and the
# hardware maximum. The Set/Reset calls are "Device Commands": "Non-admin users
# will see an NVML_ERROR_NO_PERMISSION error code" (NVML API reference); locked
# GPU clocks need Volta or newer, locked memory clocks Ampere or newer
# (NotSupported otherwise: feature "clock_lock" here).
def nvmlDeviceGetMaxClockInfo(handle, type):
    dev = _dev(handle, "sm_clock" if type != NVML_CLOCK_MEM else "memory_clock")
    key = "supported_mem_clocks_mhz" if type == NVML_CLOCK_MEM else "supported_sm_clocks_mhz"
    return int(max(dev[key]))


def nvmlDeviceGetSupportedMemoryClocks(handle):
    # The binding does the two-call INSUFFICIENT_SIZE dance and returns a list.
    return [int(v) for v in _dev(handle, "supported_clocks")["supported_mem_clocks_mhz"]]


def nvmlDeviceGetSupportedGraphicsClocks(handle, memoryClockMHz):
    dev = _dev(handle, "supported_clocks")
    # "NVML_ERROR_NOT_FOUND if the specified memoryClockMHz is not a supported
    # frequency" (NVML API reference, nvmlDeviceGetSupportedGraphicsClocks).
    if int(memoryClockMHz) not in dev["supported_mem_clocks_mhz"]:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return [int(v) for v in dev["supported_sm_clocks_mhz"]]


def _modify(apply) -> None:
    """A setter's state change: NVML_ERROR_UNINITIALIZED before nvmlInit, as the
    real library; apply's return code raised as NVMLError, SUCCESS returns."""
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    ret = _fgs.modify(_path(), apply)
    if ret != NVML_SUCCESS:
        raise NVMLError(ret)


def _lock(handle, domain: str, low, high):
    _dev(handle, "clock_lock")  # index and NotSupported checks before touching the file
    index = handle.index
    key = "supported_sm_clocks_mhz" if domain == "sm" else "supported_mem_clocks_mhz"

    def apply(state):
        dev = _nvidia(state)[index]
        entry = {"domain": domain, "action": "lock" if low is not None else "reset",
                 "mhz": None if low is None else [int(low), int(high)], "t": time.time()}
        dev.setdefault("clock_log", []).append(entry)
        if dev.get("deny_set"):
            entry["result"] = "denied"
            return NVML_ERROR_NO_PERMISSION
        if low is not None:
            supported = dev[key]
            # A pair outside the supported clocks, or min above max: a bad argument.
            if low > high or low < min(supported) or high > max(supported):
                entry["result"] = "invalid"
                return NVML_ERROR_INVALID_ARGUMENT
        if dev.get("ignore_clock_set"):
            entry["result"] = "ignored"
            return NVML_SUCCESS
        limits = dict(dev.get("clock_limits") or {})
        if dev.get("settle_s"):  # the clock follows late (fake_gpu_state.py)
            dev.setdefault("previous_clock_limits", {})[domain] = limits.get(domain)
            dev.setdefault("clock_set_t", {})[domain] = time.time()
        limits[domain] = None if low is None else [int(low), int(high)]
        dev["clock_limits"] = limits
        entry["result"] = "ok"
        return NVML_SUCCESS

    _modify(apply)


def nvmlDeviceSetGpuLockedClocks(handle, minGpuClockMHz, maxGpuClockMHz):
    _lock(handle, "sm", int(minGpuClockMHz), int(maxGpuClockMHz))


def nvmlDeviceResetGpuLockedClocks(handle):
    _lock(handle, "sm", None, None)


def nvmlDeviceSetMemoryLockedClocks(handle, minMemClockMHz, maxMemClockMHz):
    _lock(handle, "mem", int(minMemClockMHz), int(maxMemClockMHz))


def nvmlDeviceResetMemoryLockedClocks(handle):
    _lock(handle, "mem", None, None)


# --- workload power profiles (nvidia-ml-py 13.615.71 pynvml.py:7479-7597) ---------
# NVML API reference, "Power Profile Information" (group__nvmlPowerProfiles): the
# structs below have the binding's layout and version words; the calls take a
# pointer (ctypes.byref) to one, check its version (a wrong one:
# NVML_ERROR_ARGUMENT_VERSION_MISMATCH), and answer NVML_ERROR_NOT_SUPPORTED on
# boards without profiles (feature "power_profiles"); a driver older than the
# calls lacks the symbols (state "removed_functions": FUNCTION_NOT_FOUND). Set adds
# the mask's profiles to those requested, Clear removes them (Device Commands:
# NO_PERMISSION without root, "deny_set"). The enforced mask is the requested one
# minus profiles that conflict with a requested one of higher priority; here a
# device's "profile_conflicts" ({id: [ids]}) names them, the lower id winning.
class c_nvmlMask255_t(ctypes.Structure):
    _fields_ = [("mask", ctypes.c_uint * 8)]


NVML_WORKLOAD_POWER_MAX_PROFILES = 255
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


class c_nvmlWorkloadPowerProfileInfo_v1_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("profileId", ctypes.c_uint),
                ("priority", ctypes.c_uint), ("conflictingmask", c_nvmlMask255_t)]


class c_nvmlWorkloadPowerProfileProfilesInfo_v1_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("perfProfilesMask", c_nvmlMask255_t),
                ("perfProfile", c_nvmlWorkloadPowerProfileInfo_v1_t * NVML_WORKLOAD_POWER_MAX_PROFILES)]

    def __init__(self):
        super().__init__(version=nvmlWorkloadPowerProfileProfilesInfo_v1)


class c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("perfProfilesMask", c_nvmlMask255_t),
                ("requestedProfilesMask", c_nvmlMask255_t), ("enforcedProfilesMask", c_nvmlMask255_t)]

    def __init__(self):
        super().__init__(version=nvmlWorkloadPowerProfileCurrentProfiles_v1)


class c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("requestedProfilesMask", c_nvmlMask255_t)]

    def __init__(self):
        super().__init__(version=nvmlWorkloadPowerProfileRequestedProfiles_v1)


# Version words as in pynvml.py (NVML_STRUCT_VERSION: size | version << 24).
nvmlWorkloadPowerProfileInfo_v1 = 0x100002c
nvmlWorkloadPowerProfileProfilesInfo_v1 = 0x1002bf8
nvmlWorkloadPowerProfileCurrentProfiles_v1 = 0x1000064
nvmlWorkloadPowerProfileRequestedProfiles_v1 = 0x1000024


def _struct(ref, kind, version: int):
    """The struct a byref() points at; INVALID_ARGUMENT / VERSION_MISMATCH as NVML."""
    obj = getattr(ref, "_obj", ref)
    if not isinstance(obj, kind):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if obj.version != version:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return obj


def _set_mask(mask, ids) -> None:
    for i in ids:
        mask.mask[int(i) // 32] |= 1 << (int(i) % 32)


def _mask_ids(mask) -> list[int]:
    return [w * 32 + b for w in range(8) for b in range(32) if mask.mask[w] >> b & 1]


def _profiles_dev(name: str, handle) -> dict:
    """A board without a "power_profiles" list has none: NOT_SUPPORTED."""
    _present(name)
    dev = _dev(handle, "power_profiles")
    if "power_profiles" not in dev:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return dev


def _enforced(dev: dict) -> list[int]:
    requested = sorted(dev.get("requested_profiles", []))
    conflicts = {int(k): v for k, v in (dev.get("profile_conflicts") or {}).items()}
    return [i for i in requested if not any(j < i and i in conflicts.get(j, []) for j in requested)]


def nvmlDeviceWorkloadPowerProfileGetProfilesInfo(device, profilesInfo):
    info = _struct(profilesInfo, c_nvmlWorkloadPowerProfileProfilesInfo_v1_t,
                   nvmlWorkloadPowerProfileProfilesInfo_v1)
    dev = _profiles_dev("nvmlDeviceWorkloadPowerProfileGetProfilesInfo", device)
    for n, pid in enumerate(dev.get("power_profiles", [])):
        _set_mask(info.perfProfilesMask, [pid])
        info.perfProfile[n].version, info.perfProfile[n].profileId = nvmlWorkloadPowerProfileInfo_v1, pid
    return NVML_SUCCESS


def nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(device, currentProfiles):
    now = _struct(currentProfiles, c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t,
                  nvmlWorkloadPowerProfileCurrentProfiles_v1)
    dev = _profiles_dev("nvmlDeviceWorkloadPowerProfileGetCurrentProfiles", device)
    _set_mask(now.perfProfilesMask, dev.get("power_profiles", []))
    _set_mask(now.requestedProfilesMask, dev.get("requested_profiles", []))
    _set_mask(now.enforcedProfilesMask, [] if dev.get("ignore_profile_set") else _enforced(dev))
    return NVML_SUCCESS


def _request_profiles(name: str, device, requestedProfiles, add: bool):
    req = _struct(requestedProfiles, c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t,
                  nvmlWorkloadPowerProfileRequestedProfiles_v1)
    _profiles_dev(name, device)
    ids, index = _mask_ids(req.requestedProfilesMask), device.index

    def apply(state):
        dev = _nvidia(state)[index]
        entry = {"action": "set" if add else "clear", "ids": ids, "t": time.time()}
        dev.setdefault("profile_log", []).append(entry)
        if dev.get("deny_set"):
            entry["result"] = "denied"
            return NVML_ERROR_NO_PERMISSION
        if any(i not in dev.get("power_profiles", []) for i in ids):
            entry["result"] = "invalid"
            return NVML_ERROR_INVALID_ARGUMENT
        now = set(dev.get("requested_profiles", []))
        dev["requested_profiles"] = sorted(now | set(ids) if add else now - set(ids))
        entry["result"] = "ok"
        return NVML_SUCCESS

    _modify(apply)
    return NVML_SUCCESS


def nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(device, requestedProfiles):
    return _request_profiles("nvmlDeviceWorkloadPowerProfileSetRequestedProfiles", device,
                             requestedProfiles, add=True)


def nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(device, requestedProfiles):
    return _request_profiles("nvmlDeviceWorkloadPowerProfileClearRequestedProfiles", device,
                             requestedProfiles, add=False)


def nvmlDeviceGetTemperature(handle, sensor):
    # DEPRECATED in pynvml.py:3875: "Use nvmlDeviceGetTemperatureV instead; will
    # be removed in CUDA 14.0" (state "removed_functions" plays that driver).
    _present("nvmlDeviceGetTemperature")
    return int(_dev(handle, "temperature")["temperature_c"])


def nvmlDeviceGetTemperatureV(handle, sensor, version=nvmlTemperature_v1):
    # pynvml.py:3860-3873: a versioned struct; returns the temperature in °C.
    if version != nvmlTemperature_v1:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _present("nvmlDeviceGetTemperatureV")
    return int(_dev(handle, "temperature")["temperature_c"])


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=int(_dev(handle, "utilization")["utilization_pct"]), memory=0)


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    _present("nvmlDeviceGetCurrentClocksEventReasons")  # absent before driver R535
    return int(_dev(handle, "throttle")["throttle_reasons"])


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    _present("nvmlDeviceGetCurrentClocksThrottleReasons")  # deprecated, pynvml.py:4664
    return int(_dev(handle, "throttle")["throttle_reasons"])


# --- power limits (mW) -------------------------------------------------------------
def _mw(watts: float) -> int:
    return int(round(watts * 1000))


def nvmlDeviceGetPowerManagementLimitConstraints(handle):
    dev = _dev(handle, "constraints")
    return [_mw(dev["min_limit_w"]), _mw(dev["max_limit_w"])]


def nvmlDeviceGetPowerManagementDefaultLimit(handle):
    return _mw(_dev(handle, "default_limit")["default_limit_w"])


def nvmlDeviceGetPowerManagementLimit(handle):
    return _mw(_dev(handle, "current_limit")["current_limit_w"])


def nvmlDeviceGetEnforcedPowerLimit(handle):
    # "can be different from nvmlDeviceGetPowerManagementLimit if other limits
    # are set elsewhere ... includes the out of band power limit interface"
    # (NVML API reference): a BMC/site limit, "enforced_limit_w", can be lower.
    return _mw(_fgs.enforced_limit_w(_dev(handle, "enforced_limit")))


def nvmlDeviceSetPowerManagementLimit(handle, limit):
    _dev(handle, "set_limit")  # index and NotSupported checks before touching the file
    index = handle.index
    watts = limit / 1000.0

    def apply(state):
        dev = _nvidia(state)[index]
        entry = {"watts": watts, "t": time.time()}
        dev.setdefault("set_log", []).append(entry)
        if dev.get("deny_set"):
            entry["result"] = "denied"
            return NVML_ERROR_NO_PERMISSION
        if not dev["min_limit_w"] <= watts <= dev["max_limit_w"]:
            entry["result"] = "invalid"
            return NVML_ERROR_INVALID_ARGUMENT
        if dev.get("ignore_set"):
            entry["result"] = "ignored"
            return NVML_SUCCESS
        _fgs.fold_energy(dev)
        if dev.get("settle_s"):  # the enforced limit follows late (fake_gpu_state.py)
            dev["previous_limit_w"], dev["limit_set_t"] = _fgs.enforced_limit_w(dev), time.time()
        dev["current_limit_w"] = watts
        entry["result"] = "ok"
        return NVML_SUCCESS

    _modify(apply)


def _counted(name, fn):
    from functools import wraps

    @wraps(fn)
    def wrapper(*args, **kwargs):
        CALLS[name] = CALLS.get(name, 0) + 1
        return fn(*args, **kwargs)

    return wrapper


for _name in [n for n in list(globals()) if n.startswith("nvmlDevice")]:
    globals()[_name] = _counted(_name, globals()[_name])
