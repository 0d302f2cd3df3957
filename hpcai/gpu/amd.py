"""AMD GPUs through amdsmi (ROCm 6.3+ Python package).

The amdsmi to use is the one the node's ROCm ships (ROCM_PATH, default
/opt/rocm, under share/amd_smi): the package index's copy calls itself
unofficial and binds symbols of one ROCm release at import. Importing it must
print nothing on stdout (``info --json``), so its chatter is captured.

amdsmi speaks whole watts (or the string "N/A") for power, µW for caps and a
counter times a resolution in µJ for energy; everything leaving this module
is in W and J. Devices are ordered as HIP numbers them (``cuda:N`` in
PyTorch), which is not amdsmi's handle order on every node.

amdsmi is not thread-safe before ROCm 7.2, so every call goes through one
module-level lock.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from pathlib import Path

from hpcai.errors import CapOutOfRangeError, DeviceError, PowerError, PowerPermissionError
from hpcai.gpu.base import GpuDevice, GpuInfo, GpuLibrary, GpuReading, PowerLimits

INSTALL_HINT = (
    "install the amdsmi that ships with the node's ROCm: "
    "pip install $ROCM_PATH/share/amd_smi (ROCM_PATH defaults to /opt/rocm)"
)
# The kernel's energy unit, 2^-16 J; the library reports a rounded 15.3 µJ
# (rocm_smi kEnergyCounterResolution), 0.27% high.
HARDWARE_RESOLUTION_UJ = 1e6 / 65536
ROUNDED_RESOLUTION_UJ = 15.3
# "Not available" as amdsmi passes it through: 0xFFFF up to ROCm 7.0,
# UINT32_MAX from 7.1; no power (W), activity (%), temperature or clock is near.
NA_MARKER_MIN = 0xFFFF
# amdsmi_get_violation_status flags (1 active, 0 not, 255 unsupported) as
# the names NVIDIA's reasons use where they mean the same.
VIOLATIONS = {
    "active_ppt_pwr": "sw_power_cap",  # PVIOL: package power tracking
    "active_socket_thrm": "sw_thermal",  # TVIOL
    "active_prochot_thrm": "hw_thermal",
    "active_vr_thrm": "vr_thermal",
    "active_hbm_thrm": "hbm_thermal",
}

_LOCK = threading.RLock()


def _call(fn, *args):
    with _LOCK:
        return fn(*args)


def _status(amdsmi, name: str) -> int | None:
    """The numeric status for e.g. "NO_PERM"; names moved between releases."""
    wrapper = getattr(amdsmi, "amdsmi_wrapper", None)
    value = getattr(wrapper, f"AMDSMI_STATUS_{name}", None)
    if value is not None:
        return int(value)
    for member in getattr(amdsmi, "AmdSmiRetCode", ()):
        if member.name in (name, f"STATUS_{name}", f"ERR_{name}"):
            return int(member)
    return None


def _number(value) -> float | None:
    """amdsmi reports missing values as "N/A" (or a max-int the wrapper turns into it)."""
    if value is None or isinstance(value, str) or isinstance(value, bool):
        return None
    return float(value)


def _measure(value) -> float | None:
    """A power, activity, temperature or clock: None for "N/A" and the
    0xFFFF / 0xFFFFFFFF markers a wrapper did not translate."""
    number = _number(value)
    return None if number is None or number >= NA_MARKER_MIN else number


def _asic_serial(value) -> str | None:
    """amdsmi_get_gpu_asic_info's "asic_serial" (amdsmi_asic_info_t, the ASIC's
    serial number: AMD SMI docs, "ASIC & Board Static Information"; the Python
    wrapper decodes the C string). "N/A", empty or all zeros: it cannot say."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or text.upper() == "N/A" or text.lower().removeprefix("0x").strip("0") == "":
        return None
    return text


def energy_resolution_uj(reported) -> float | None:
    """The counter's unit: the hardware's 2^-16 J where the library rounds it."""
    number = _number(reported)
    if number is None:
        return None
    return HARDWARE_RESOLUTION_UJ if abs(number - ROUNDED_RESOLUTION_UJ) < 1e-3 else number


def rocm_amdsmi_dir() -> Path | None:
    """ROCm's own amdsmi package folder, when this node has ROCm."""
    root = Path(os.environ.get("ROCM_PATH") or "/opt/rocm") / "share" / "amd_smi"
    return root if (root / "amdsmi" / "__init__.py").is_file() else None


def import_amdsmi():
    """amdsmi, ROCm's copy first; DeviceError in one line when it cannot load.

    Importing the package index's amdsmi without libamd_smi.so prints to
    stdout, and one built for a newer ROCm fails binding a symbol the node's
    library lacks (e.g. amdsmi_get_gpu_enumeration_info, ROCm 6.4+).
    """
    if "amdsmi" not in sys.modules:
        rocm = rocm_amdsmi_dir()
        if rocm is not None and str(rocm) not in sys.path:
            sys.path.insert(0, str(rocm))
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter):
            import amdsmi  # lazy: importing hpcai.gpu must not need it
    except AttributeError as exc:  # a C symbol the node's libamd_smi.so does not have
        raise DeviceError(
            f"the amdsmi Python package ({_where('amdsmi')}) does not match this node's "
            f"libamd_smi.so ({exc})", INSTALL_HINT) from exc
    except Exception as exc:  # ImportError, or OSError/KeyError without libamd_smi.so
        said = " ".join(chatter.getvalue().split())
        detail = f"{type(exc).__name__}: {exc}" + (f"; it said: {said}" if said else "")
        raise DeviceError(f"amdsmi cannot be imported ({detail})", INSTALL_HINT) from exc
    return amdsmi


def python_package_origin(module) -> str:
    """Where the imported amdsmi comes from: ROCm's copy, or elsewhere (a
    mismatch risk when the node has ROCm's own)."""
    path = Path(getattr(module, "__file__", "") or "").resolve()
    rocm = rocm_amdsmi_dir()
    if rocm is not None and rocm.resolve() in path.parents:
        return f"ROCm's own ({rocm})"
    where = str(path) if str(path) != "." else "unknown location"
    return where + (f"; not ROCm's own at {rocm}: pip install {rocm}" if rocm is not None else "")


def _where(name: str) -> str:
    from importlib import metadata

    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        version = "version unknown"
    spec = sys.modules.get(name)
    return f"{version}, {getattr(spec, '__file__', None) or 'location unknown'}"


def _error_code(exc) -> int | None:
    code = getattr(exc, "err_code", None)
    if code is None and hasattr(exc, "get_error_code"):
        code = exc.get_error_code()
    return None if code is None else abs(int(code))


class AmdLibrary(GpuLibrary):
    vendor = "amd"

    def __init__(self, amdsmi=None):
        if amdsmi is None:
            amdsmi = import_amdsmi()
        self._amdsmi = amdsmi
        try:
            _call(amdsmi.amdsmi_init)
        except amdsmi.AmdSmiException as exc:
            raise DeviceError(
                f"amdsmi failed to initialise: {exc}",
                "check that the amdgpu driver is loaded (amd-smi works) on this node",
            ) from exc
        self._open = True
        self._devices: list[AmdDevice] | None = None
        self._unsupported = {
            c for c in (_status(amdsmi, n) for n in ("NOT_SUPPORTED", "NOT_YET_IMPLEMENTED", "NO_DATA")) if c is not None
        }

    def devices(self) -> list[AmdDevice]:
        if self._devices is None:
            amdsmi = self._amdsmi
            try:
                handles = _call(amdsmi.amdsmi_get_processor_handles)
            except amdsmi.AmdSmiException as exc:
                raise DeviceError(f"amdsmi failed to list GPUs: {exc}") from exc
            ordered = self._hip_order(handles)
            self._devices = [AmdDevice(self, h, i) for i, h in enumerate(ordered)]
        return list(self._devices)

    inaccessible: list = []  # amdsmi lists only the GPUs this process can open

    def _hip_order(self, handles: list) -> list:
        """Sort handles by HIP id (ROCm 6.4+); keep enumeration order if any is unknown."""
        fn = getattr(self._amdsmi, "amdsmi_get_gpu_enumeration_info", None)
        if fn is None:
            return list(handles)
        keys = []
        for h in handles:
            try:
                hip_id = _call(fn, h).get("hip_id")
            except self._amdsmi.AmdSmiException:
                return list(handles)
            if not isinstance(hip_id, int) or isinstance(hip_id, bool):
                return list(handles)  # "N/A"
            keys.append(hip_id)
        if len(set(keys)) != len(keys):
            return list(handles)
        return [h for _, h in sorted(zip(keys, handles), key=lambda kv: kv[0])]

    def versions(self) -> dict[str, str]:
        amdsmi = self._amdsmi
        out: dict[str, str] = {"amdsmi_python": python_package_origin(amdsmi)}
        try:
            v = _call(amdsmi.amdsmi_get_lib_version)
            out["amdsmi"] = ".".join(str(v[k]) for k in ("major", "minor", "release") if k in v)
        except (amdsmi.AmdSmiException, AttributeError):
            pass
        devices = self.devices()
        if devices:
            try:
                out["driver"] = str(_call(amdsmi.amdsmi_get_gpu_driver_info, devices[0]._handle)["driver_version"])
            except (amdsmi.AmdSmiException, AttributeError, KeyError):
                pass
        return out

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                _call(self._amdsmi.amdsmi_shut_down)
            except self._amdsmi.AmdSmiException:
                pass


class AmdDevice(GpuDevice):
    def __init__(self, library: AmdLibrary, handle, index: int):
        self._lib = library
        self._amdsmi = library._amdsmi
        self._handle = handle
        self.index = index
        self._info: GpuInfo | None = None
        self.failures: dict[str, str] = {}

    def _optional(self, name: str, *args):
        """A metric that may fail alone (BUSY, RETRY, ...): None, never the reading."""
        try:
            return self._get(name, *args)
        except DeviceError as exc:
            self.failures[name] = exc.message
            return None

    def _get(self, name: str, *args):
        """Call amdsmi; NOT_SUPPORTED -> None, other failures -> DeviceError."""
        amdsmi = self._amdsmi
        fn = getattr(amdsmi, name, None)
        if fn is None:
            return None
        try:
            return _call(fn, self._handle, *args)
        except amdsmi.AmdSmiLibraryException as exc:
            if _error_code(exc) in self._lib._unsupported:
                return None
            raise DeviceError(f"amdsmi {name} failed on GPU {self.index}: {exc}") from exc
        except amdsmi.AmdSmiException as exc:
            raise DeviceError(f"amdsmi {name} failed on GPU {self.index}: {exc}") from exc

    def info(self) -> GpuInfo:
        if self._info is None:
            asic = self._optional("amdsmi_get_gpu_asic_info") or {}
            total = self._optional("amdsmi_get_gpu_memory_total", self._amdsmi.AmdSmiMemoryType.VRAM)
            bdf = self._optional("amdsmi_get_gpu_device_bdf")
            enumeration = self._optional("amdsmi_get_gpu_enumeration_info") or {}
            hip_uuid = enumeration.get("hip_uuid")
            self._info = GpuInfo(
                index=self.index,
                vendor="amd",
                name=str(asic.get("market_name", "AMD GPU")),
                uuid=str(self._get("amdsmi_get_gpu_device_uuid")),
                memory_total_bytes=int(_number(total) or 0),
                pci_bus_id=None if bdf is None else str(bdf),
                # ROCr names GPUs "GPU-<16 hex>", not by amdsmi's UUID (ROCm 6.4 changelog).
                visible_id=hip_uuid if isinstance(hip_uuid, str) and hip_uuid.startswith("GPU-") else None,
                serial=_asic_serial(asic.get("asic_serial")),
            )
        return self._info

    def _clock(self, kind) -> float | None:
        info = self._optional("amdsmi_get_clock_info", kind)
        if not info:
            return None
        return _measure(info.get("clk", info.get("cur_clk")))  # "cur_clk" before ROCm 6.2

    def _temperature(self) -> float | None:
        types = self._amdsmi.AmdSmiTemperatureType
        metric = self._amdsmi.AmdSmiTemperatureMetric.CURRENT
        # Hotspot (junction) first: MI300X reports no edge temperature.
        for name in ("HOTSPOT", "JUNCTION", "EDGE"):
            sensor = getattr(types, name, None)
            if sensor is None:
                continue
            value = _measure(self._optional("amdsmi_get_temp_metric", sensor, metric))
            if value is not None:
                return value
        return None

    @staticmethod
    def _socket_power(table: dict) -> tuple[float | None, str | None]:
        power_w, source = _measure(table.get("current_socket_power")), "instant"
        if power_w is None:  # MI200/MI210: only the average
            power_w, source = _measure(table.get("average_socket_power")), "average"
        return power_w, source if power_w is not None else None

    def power_fields(self) -> dict[str, float | None]:
        info = self._optional("amdsmi_get_power_info") or {}
        return {"instant": _measure(info.get("current_socket_power")),
                "average": _measure(info.get("average_socket_power"))}

    def read_power(self) -> GpuReading:
        """One read of the GPU metrics table per tick, where the library has it
        (power_info and energy_count each re-read that table)."""
        table = None
        if hasattr(self._amdsmi, "amdsmi_get_gpu_metrics_info"):
            table = self._optional("amdsmi_get_gpu_metrics_info")
        if table:
            power_w, source = self._socket_power(table)
            ticks = _number(table.get("energy_accumulator"))
            energy = None if ticks is None else ticks * HARDWARE_RESOLUTION_UJ / 1e6
            if power_w is not None or energy is not None:
                return GpuReading(power_w=power_w, power_source=source, energy_j=energy,
                                  throttle_reasons=None)
        return self._read_power_calls()

    def _read_power_calls(self) -> GpuReading:
        failures = []
        try:
            power_w, source = self._socket_power(self._get("amdsmi_get_power_info") or {})
        except DeviceError as exc:
            power_w, source = None, None
            failures.append(exc.message)
        try:
            energy = self.energy_j()
        except DeviceError as exc:
            energy = None
            failures.append(exc.message)
        if power_w is None and energy is None and failures:
            raise DeviceError(f"GPU {self.index}: {'; '.join(failures)}")
        return GpuReading(power_w=power_w, power_source=source, energy_j=energy, throttle_reasons=None)

    def read(self) -> GpuReading:
        amdsmi = self._amdsmi
        reading = self._read_power_calls()
        activity = self._optional("amdsmi_get_gpu_activity") or {}
        used = self._optional("amdsmi_get_gpu_memory_usage", amdsmi.AmdSmiMemoryType.VRAM)
        caps = self._optional("amdsmi_get_power_cap_info") or {}
        cap_uw = _number(caps.get("power_cap"))
        reading.sm_clock_mhz = self._clock(amdsmi.AmdSmiClkType.GFX)
        reading.memory_clock_mhz = self._clock(amdsmi.AmdSmiClkType.MEM)
        reading.temperature_c = self._temperature()
        reading.utilization_pct = _measure(activity.get("gfx_activity"))
        reading.memory_used_bytes = None if _number(used) is None else int(used)
        reading.power_limit_w = None if cap_uw is None else cap_uw / 1e6
        reading.throttle_reasons = self._throttle()
        return reading

    def _throttle(self) -> list[str] | None:
        """From amdsmi_get_violation_status; None (unknown) where it is missing."""
        status = None
        if hasattr(self._amdsmi, "amdsmi_get_violation_status"):
            status = self._optional("amdsmi_get_violation_status")
        if not status:
            return None
        known = {key: status.get(key) for key in VIOLATIONS if status.get(key) in (0, 1)}
        if not known:
            return None
        return [VIOLATIONS[key] for key, active in known.items() if active == 1]

    def energy_j(self) -> float | None:
        count = self._get("amdsmi_get_energy_count")
        if not count:
            return None
        ticks = _number(count.get("energy_accumulator", count.get("power")))  # "power" before 6.2.1
        resolution = energy_resolution_uj(count.get("counter_resolution"))
        if ticks is None or resolution is None:
            return None
        return ticks * resolution / 1e6  # µJ -> J

    def power_limits(self) -> PowerLimits:
        caps = self._get("amdsmi_get_power_cap_info")
        current = _number((caps or {}).get("power_cap"))
        if current is None:
            raise PowerError(f"GPU {self.index} reports no power cap", "this GPU does not support power capping")

        def w(key):
            v = _number(caps.get(key))
            return None if v is None else v / 1e6

        return PowerLimits(
            current_w=current / 1e6,
            default_w=w("default_power_cap"),
            min_w=w("min_power_cap"),
            max_w=w("max_power_cap"),
            enforced_w=current / 1e6,
        )

    def set_power_limit_w(self, watts: float) -> None:
        amdsmi = self._amdsmi
        microwatts = int(round(watts * 1_000_000))
        try:
            _call(amdsmi.amdsmi_set_power_cap, self._handle, 0, microwatts)
        except amdsmi.AmdSmiLibraryException as exc:
            code = _error_code(exc)
            if code is not None and code == _status(amdsmi, "NO_PERM"):
                raise PowerPermissionError(
                    f"no permission to set the power cap of GPU {self.index}",
                    "run as root, or use the site's `command` power method with a sudo helper",
                ) from exc
            if code in self._lib._unsupported:
                raise PowerError(f"GPU {self.index} does not support setting a power cap") from exc
            if code in (_status(amdsmi, "INVAL"), _status(amdsmi, "INPUT_OUT_OF_BOUNDS")):
                raise CapOutOfRangeError(
                    f"amdsmi rejected {watts:g} W for GPU {self.index}",
                    "pick a cap within the GPU's min/max limits (hpcai-launch info shows them)",
                ) from exc
            raise PowerError(f"setting the power cap of GPU {self.index} failed: {exc}") from exc
        except amdsmi.AmdSmiException as exc:
            raise PowerError(f"setting the power cap of GPU {self.index} failed: {exc}") from exc
