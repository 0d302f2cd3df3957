"""NVIDIA GPUs through NVML (the official nvidia-ml-py package, module ``pynvml``).

NVML speaks mW and mJ; everything leaving this module is in W and J. Device
index is the NVML index, which enumerates in PCI bus order and ignores
CUDA_VISIBLE_DEVICES (map to ``cuda:N`` by UUID, not by position). NVML counts
every GPU of the node; under a Slurm job with cgroup device constraint the
others refuse their handles, and are listed in ``inaccessible``.
"""
from __future__ import annotations

from hpcai.errors import CapOutOfRangeError, DeviceError, PowerError, PowerPermissionError
from hpcai.gpu.base import GpuDevice, GpuInfo, GpuLibrary, GpuReading, PowerLimits
from hpcai.install import install_hint

INSTALL_HINT = f"install nvidia-ml-py ({install_hint('nvidia')})"

# Bits of nvmlDeviceGetCurrentClocksEventReasons; fixed by the NVML ABI.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",  # nvmlClocksThrottleReasonBoardLimit (pynvml.py:2225)
    0x400: "reliability",  # nvmlClocksThrottleReasonReliability (pynvml.py:2226)
}

# nvmlValueType_t -> member of the c_nvmlValue_t union.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def decode_throttle_reasons(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_BITS)
    if unknown:
        names.append(f"unknown_0x{unknown:x}")
    return names


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvidiaLibrary(GpuLibrary):
    vendor = "nvidia"

    def __init__(self, nvml=None):
        if nvml is None:
            try:
                import pynvml as nvml  # lazy: importing hpcai.gpu must not need it
            except ImportError as exc:
                raise DeviceError("nvidia-ml-py is not installed", INSTALL_HINT) from exc
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise DeviceError(
                f"NVML failed to initialise: {exc}",
                "check that the NVIDIA driver is loaded (nvidia-smi works) on this node",
            ) from exc
        self._open = True
        self._devices: list[NvidiaDevice] | None = None
        self.inaccessible: list[dict] = []

    def devices(self) -> list[NvidiaDevice]:
        """The GPUs this process may open; the others go to ``inaccessible``."""
        if self._devices is None:
            nvml = self._nvml
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                raise DeviceError(f"NVML failed to count GPUs: {exc}") from exc
            devices, skipped = [], []
            for i in range(count):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(i)
                    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                except nvml.NVMLError as exc:
                    # NoPermission: outside this job's cgroup; GpuIsLost: a failed GPU.
                    skipped.append({"index": i, "reason": str(exc)})
                    continue
                devices.append(NvidiaDevice(nvml, handle, i, uuid))
            self._devices, self.inaccessible = devices, skipped
        return list(self._devices)

    def versions(self) -> dict[str, str]:
        nvml = self._nvml
        out: dict[str, str] = {}
        for key, name in (("driver", "nvmlSystemGetDriverVersion"), ("nvml", "nvmlSystemGetNVMLVersion")):
            try:
                out[key] = _text(getattr(nvml, name)())
            except (nvml.NVMLError, AttributeError):
                pass
        fn = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
            nvml, "nvmlSystemGetCudaDriverVersion", None
        )
        if fn is not None:
            try:
                v = int(fn())  # e.g. 12040 -> "12.4"
                out["cuda_driver"] = f"{v // 1000}.{(v % 1000) // 10}"
            except nvml.NVMLError:
                pass
        return out

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass  # shutting down twice or after a lost GPU is harmless


class NvidiaDevice(GpuDevice):
    def __init__(self, nvml, handle, index: int, uuid: str | None = None):
        self._nvml = nvml
        self._handle = handle
        self.index = index
        self._uuid = uuid
        self._info: GpuInfo | None = None
        # Codes that mean "this GPU or driver cannot tell": a field becomes None.
        self._unsupported = {
            getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
        }
        self.failures: dict[str, str] = {}  # optional metric -> its last error
        self._essential_failures: list[str] = []

    # -- helpers ------------------------------------------------------------
    def _call(self, name: str, *args):
        """Call an NVML function; NotSupported -> None, other failures -> DeviceError."""
        fn = getattr(self._nvml, name, None)
        if fn is None:
            return None  # older nvidia-ml-py without this function
        try:
            return fn(self._handle, *args)
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) in self._unsupported:
                return None
            raise DeviceError(f"NVML {name} failed on GPU {self.index}: {exc}") from exc

    def _optional(self, name: str, *args):
        """A metric that may fail alone (NoPermission in a MIG container,
        Timeout, ...): None, remembered in ``failures``, never the whole reading."""
        try:
            return self._call(name, *args)
        except DeviceError as exc:
            self.failures[name] = exc.message
            return None

    @staticmethod
    def _w(mw) -> float | None:
        return None if mw is None else mw / 1000.0

    # -- GpuDevice ------------------------------------------------------------
    def info(self) -> GpuInfo:
        if self._info is None:
            memory = self._optional("nvmlDeviceGetMemoryInfo")
            pci = self._optional("nvmlDeviceGetPciInfo")
            name = self._optional("nvmlDeviceGetName")
            uuid = self._uuid or _text(self._call("nvmlDeviceGetUUID"))
            mig = self._mig_uuids()
            self._info = GpuInfo(
                index=self.index,
                vendor="nvidia",
                name=_text(name) if name is not None else "NVIDIA GPU",
                uuid=uuid,
                memory_total_bytes=int(memory.total) if memory is not None else 0,
                pci_bus_id=_text(pci.busId) if pci is not None else None,
                visible_id=uuid,
                mig_enabled=mig is not None,
                mig_uuids=tuple(mig or ()),
                serial=self._serial(),
            )
        return self._info

    def _serial(self) -> str | None:
        """nvmlDeviceGetSerial: "for all products with an inforom" (NVML API
        reference, Device Queries); GeForce parts raise NotSupported -> None."""
        serial = self._optional("nvmlDeviceGetSerial")
        text = _text(serial).strip() if serial is not None else ""
        return text or None

    def _mig_uuids(self) -> list[str] | None:
        """None when MIG is off; else the UUIDs of the GPU's MIG devices."""
        nvml = self._nvml
        mode = self._optional("nvmlDeviceGetMigMode")
        if not mode or mode[0] != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return None
        uuids = []
        for slot in range(self._optional("nvmlDeviceGetMaxMigDeviceCount") or 0):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(self._handle, slot)
                uuids.append(_text(nvml.nvmlDeviceGetUUID(mig)))
            except nvml.NVMLError:
                continue  # an empty slot (NotFound)
        return uuids

    def _power(self) -> tuple[float | None, str | None]:
        nvml = self._nvml
        field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if field is not None:
            values = self._optional("nvmlDeviceGetFieldValues", [field])
            # Each field carries its own return code; a failed one holds garbage.
            if values and values[0].nvmlReturn == getattr(nvml, "NVML_SUCCESS", 0):
                member = _VALUE_MEMBERS.get(values[0].valueType, "uiVal")
                return getattr(values[0].value, member) / 1000.0, "instant"
        average = self._call("nvmlDeviceGetPowerUsage")  # 1 s average on Ampere+
        if average is not None:
            return average / 1000.0, "average"
        return None, None

    def power_fields(self) -> dict[str, float | None]:
        nvml = self._nvml
        instant = None
        field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        values = self._optional("nvmlDeviceGetFieldValues", [field]) if field is not None else None
        if values and values[0].nvmlReturn == getattr(nvml, "NVML_SUCCESS", 0):
            instant = getattr(values[0].value, _VALUE_MEMBERS.get(values[0].valueType, "uiVal")) / 1000.0
        return {"instant": instant, "average": self._w(self._optional("nvmlDeviceGetPowerUsage"))}

    def _first_present(self, names: tuple[str, ...], *args):
        """The first of several names for one query that the driver has: a symbol
        the driver lacks raises FunctionNotFound, the cue to try the next."""
        nvml = self._nvml
        missing = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
        for name in names:
            fn = getattr(nvml, name, None)
            if fn is None:
                continue
            try:
                return fn(self._handle, *args)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) == missing:
                    continue
                if getattr(exc, "value", None) not in self._unsupported:
                    self.failures[name] = str(exc)
                return None
        return None

    def _throttle(self) -> list[str] | None:
        # The older name is deprecated (pynvml.py:4664) but is all a pre-R535 driver has.
        mask = self._first_present(("nvmlDeviceGetCurrentClocksEventReasons",
                                    "nvmlDeviceGetCurrentClocksThrottleReasons"))
        return decode_throttle_reasons(int(mask)) if mask is not None else None

    def _temperature(self) -> float | None:
        # nvmlDeviceGetTemperature "will be removed in CUDA 14.0" (pynvml.py:3875).
        sensor = getattr(self._nvml, "NVML_TEMPERATURE_GPU", 0)
        temp = self._first_present(("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), sensor)
        return None if temp is None else float(temp)

    def read_power(self) -> GpuReading:
        power_w, source = self._power_or_none()
        energy = self._energy_or_none()
        if power_w is None and energy is None and self._essential_failures:
            raise DeviceError(f"GPU {self.index}: {'; '.join(self._essential_failures)}")
        return GpuReading(power_w=power_w, power_source=source, energy_j=energy, throttle_reasons=None)

    def read(self) -> GpuReading:
        nvml = self._nvml
        reading = self.read_power()
        memory = self._optional("nvmlDeviceGetMemoryInfo")
        util = self._optional("nvmlDeviceGetUtilizationRates")
        sm = self._optional("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        mem = self._optional("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM)
        reading.sm_clock_mhz = None if sm is None else float(sm)
        reading.memory_clock_mhz = None if mem is None else float(mem)
        reading.temperature_c = self._temperature()
        reading.utilization_pct = None if util is None else float(util.gpu)
        reading.memory_used_bytes = None if memory is None else int(memory.used)
        reading.power_limit_w = self._w(self._optional("nvmlDeviceGetEnforcedPowerLimit"))
        reading.throttle_reasons = self._throttle()
        return reading

    # Power and energy are essential: each is read on its own, and a reading
    # fails only when both do.
    def _power_or_none(self) -> tuple[float | None, str | None]:
        self._essential_failures = []
        try:
            return self._power()
        except DeviceError as exc:
            self._essential_failures.append(exc.message)
            return None, None

    def _energy_or_none(self) -> float | None:
        try:
            return self.energy_j()
        except DeviceError as exc:
            self._essential_failures.append(exc.message)
            return None

    def energy_j(self) -> float | None:
        return self._w(self._call("nvmlDeviceGetTotalEnergyConsumption"))  # mJ -> J

    def power_limits(self) -> PowerLimits:
        constraints = self._call("nvmlDeviceGetPowerManagementLimitConstraints")
        lo, hi = constraints if constraints is not None else (None, None)
        enforced = self._w(self._call("nvmlDeviceGetEnforcedPowerLimit"))
        current = self._w(self._call("nvmlDeviceGetPowerManagementLimit"))
        if current is None:
            current = enforced
        if current is None:
            raise PowerError(f"GPU {self.index} reports no power limit", "this GPU does not support power management")
        return PowerLimits(
            current_w=current,
            default_w=self._w(self._call("nvmlDeviceGetPowerManagementDefaultLimit")),
            min_w=self._w(lo),
            max_w=self._w(hi),
            enforced_w=enforced,
        )

    def set_power_limit_w(self, watts: float) -> None:
        nvml = self._nvml
        milliwatts = int(round(watts * 1000))
        try:
            nvml.nvmlDeviceSetPowerManagementLimit(self._handle, milliwatts)
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
                raise PowerPermissionError(
                    f"no permission to set the power limit of GPU {self.index}",
                    "run as root, or use the site's `command` power method with a sudo helper",
                ) from exc
            if code in self._unsupported:
                raise PowerError(f"GPU {self.index} does not support setting a power limit") from exc
            if code == getattr(nvml, "NVML_ERROR_INVALID_ARGUMENT", 2):
                raise CapOutOfRangeError(
                    f"NVML rejected {watts:g} W for GPU {self.index}",
                    "pick a cap within the GPU's min/max limits (hpcai-launch info shows them)",
                ) from exc
            raise PowerError(f"setting the power limit of GPU {self.index} failed: {exc}") from exc
