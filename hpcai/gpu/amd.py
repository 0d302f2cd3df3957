"""AMD GPUs through amdsmi (ROCm 6.3+ Python package).

amdsmi speaks whole watts (or the string "N/A") for power, µW for caps and a
counter times a resolution in µJ for energy; everything leaving this module
is in W and J. Devices are ordered as HIP numbers them (``cuda:N`` in
PyTorch), which is not amdsmi's handle order on every node.

amdsmi is not thread-safe before ROCm 7.2, so every call goes through one
module-level lock.
"""
from __future__ import annotations

import threading

from hpcai.errors import CapOutOfRangeError, DeviceError, PowerError, PowerPermissionError
from hpcai.gpu.base import GpuDevice, GpuInfo, GpuLibrary, GpuReading, PowerLimits

INSTALL_HINT = (
    "install the amdsmi package that matches the node's ROCm (pip install 'hpcai[amd]'); "
    "it needs ROCm's libamd_smi.so"
)

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


def _error_code(exc) -> int | None:
    code = getattr(exc, "err_code", None)
    if code is None and hasattr(exc, "get_error_code"):
        code = exc.get_error_code()
    return None if code is None else abs(int(code))


class AmdLibrary(GpuLibrary):
    vendor = "amd"

    def __init__(self, amdsmi=None):
        if amdsmi is None:
            try:
                import amdsmi  # lazy: importing hpcai.gpu must not need it
            except Exception as exc:  # ImportError, or OSError/KeyError without libamd_smi.so
                raise DeviceError(f"amdsmi cannot be imported: {exc}", INSTALL_HINT) from exc
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
        out: dict[str, str] = {}
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
            asic = self._get("amdsmi_get_gpu_asic_info") or {}
            total = self._get("amdsmi_get_gpu_memory_total", self._amdsmi.AmdSmiMemoryType.VRAM)
            bdf = self._get("amdsmi_get_gpu_device_bdf")
            self._info = GpuInfo(
                index=self.index,
                vendor="amd",
                name=str(asic.get("market_name", "AMD GPU")),
                uuid=str(self._get("amdsmi_get_gpu_device_uuid")),
                memory_total_bytes=int(total or 0),
                pci_bus_id=None if bdf is None else str(bdf),
            )
        return self._info

    def _clock(self, kind) -> float | None:
        info = self._get("amdsmi_get_clock_info", kind)
        if not info:
            return None
        return _number(info.get("clk", info.get("cur_clk")))  # "cur_clk" before ROCm 6.2

    def _temperature(self) -> float | None:
        types = self._amdsmi.AmdSmiTemperatureType
        metric = self._amdsmi.AmdSmiTemperatureMetric.CURRENT
        # Hotspot (junction) first: MI300X reports no edge temperature.
        for name in ("HOTSPOT", "JUNCTION", "EDGE"):
            sensor = getattr(types, name, None)
            if sensor is None:
                continue
            value = _number(self._get("amdsmi_get_temp_metric", sensor, metric))
            if value is not None:
                return value
        return None

    def read(self) -> GpuReading:
        amdsmi = self._amdsmi
        power = self._get("amdsmi_get_power_info") or {}
        power_w, source = _number(power.get("current_socket_power")), "instant"
        if power_w is None:  # MI200/MI210: only the average
            power_w, source = _number(power.get("average_socket_power")), "average"
        activity = self._get("amdsmi_get_gpu_activity") or {}
        used = self._get("amdsmi_get_gpu_memory_usage", amdsmi.AmdSmiMemoryType.VRAM)
        caps = self._get("amdsmi_get_power_cap_info") or {}
        cap_uw = _number(caps.get("power_cap"))
        return GpuReading(
            power_w=power_w,
            power_source=source if power_w is not None else None,
            energy_j=self.energy_j(),
            sm_clock_mhz=self._clock(amdsmi.AmdSmiClkType.GFX),
            memory_clock_mhz=self._clock(amdsmi.AmdSmiClkType.MEM),
            temperature_c=self._temperature(),
            utilization_pct=_number(activity.get("gfx_activity")),
            memory_used_bytes=None if _number(used) is None else int(used),
            power_limit_w=None if cap_uw is None else cap_uw / 1e6,
            throttle_reasons=[],  # amdsmi has no NVML-like reason mask
        )

    def energy_j(self) -> float | None:
        count = self._get("amdsmi_get_energy_count")
        if not count:
            return None
        ticks = _number(count.get("energy_accumulator", count.get("power")))  # "power" before 6.2.1
        resolution = _number(count.get("counter_resolution"))
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
