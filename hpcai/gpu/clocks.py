"""Clock caps: the highest SM (graphics) and memory clock a GPU may run at.

The second knob beside power caps. Both vendors are driven through their
management library, with the device objects of hpcai.gpu.nvidia / amd:

NVIDIA (nvidia-ml-py): ``nvmlDeviceSetGpuLockedClocks(h, lo, MHZ)`` and
``nvmlDeviceSetMemoryLockedClocks(h, lo, MHZ)`` (pynvml.py:4466-4483 in
nvidia-ml-py 13.615.71), lo being the lowest supported clock, so the GPU
still idles down but never runs above MHZ. Supported values come from
``nvmlDeviceGetSupportedMemoryClocks`` and
``nvmlDeviceGetSupportedGraphicsClocks(h, mem)`` (pynvml.py:3722-3773).
NVML has no getter for a locked range: only the clock now
(``nvmlDeviceGetClockInfo``) and the hardware maximum
(``nvmlDeviceGetMaxClockInfo``) can be read. So hpcai cannot tell whether
someone else had locked the clocks before the run; it restores with
``nvmlDeviceResetGpuLockedClocks`` / ``ResetMemoryLockedClocks`` (the
driver's default, unlocked: "Resets the gpu clock to the default value",
NVML API reference, Device Commands), and the read-back after setting
checks only that the clock now is not above the cap.

AMD (amdsmi 7.0.2): ``amdsmi_set_gpu_clk_limit(h, "sclk"|"mclk", "max", MHZ)``
(amdsmi_interface.py:4175; ``amdsmi_set_gpu_clk_range`` is deprecated for it,
amdsmi.h). The range in force is readable: ``amdsmi_get_clock_info(h, GFX|MEM)``
gives ``min_clk``/``max_clk`` (amdsmi_interface.py:2349), so the snapshot is
the old maximum and restoring sets it back, then reads it back. Supported
values: ``amdsmi_get_clk_freq(h, GFX|MEM)["frequency"]``, the DPM levels in Hz
(rocm_smi.py divides them by 1e6 to print MHz); the driver accepts any MHz
between the lowest and the highest of them.
"""
from __future__ import annotations

import abc
import bisect
from dataclasses import dataclass

from hpcai.errors import CapOutOfRangeError, PowerError, PowerPermissionError

DOMAINS = ("sm", "mem")
DOMAIN_NAMES = {"sm": "SM", "mem": "memory"}
ROOT_HINT = "run as root (setting clocks needs it on both vendors)"


@dataclass(frozen=True)
class SupportedClocks:
    """What one clock domain of one GPU accepts: a list of values (NVIDIA) or a
    range (AMD: any MHz between lo and hi)."""

    values: tuple[int, ...] | None  # None: any value in [lo, hi]
    lo: int | None
    hi: int | None

    def accepts(self, mhz: int) -> bool:
        if self.values is not None:
            return mhz in self.values
        return self.lo is not None and self.hi is not None and self.lo <= mhz <= self.hi

    def nearest(self, mhz: int) -> list[int]:
        """The supported values either side of mhz (one when mhz is outside)."""
        if self.values is None:
            return [v for v in (self.lo, self.hi) if v is not None]
        values = sorted(self.values)
        if not values:
            return []
        at = bisect.bisect_left(values, mhz)
        return sorted({values[i] for i in (at - 1, at) if 0 <= i < len(values)})

    def describe(self) -> str:
        if self.values is not None:
            count = f"{len(self.values)} value{'s' if len(self.values) != 1 else ''}"
            return f"{count}, {min(self.values)}-{max(self.values)} MHz" if self.values else "none"
        return f"{self.lo}-{self.hi} MHz"


class ClockControl(abc.ABC):
    """Read, cap and restore the SM and memory clocks of one GPU."""

    vendor = ""
    # What a restore record means on this vendor, for the journal's readers.
    restore_kind = ""

    def __init__(self, device):
        self.device = device
        self.index = device.index

    @abc.abstractmethod
    def supported(self, domain: str, mem_mhz: int | None = None) -> SupportedClocks:
        """mem_mhz: NVIDIA's SM clocks depend on the memory clock in force."""

    @abc.abstractmethod
    def current_mhz(self, domain: str) -> float | None: ...

    @abc.abstractmethod
    def limit_mhz(self, domain: str) -> float | None:
        """The cap in force, where the library can say (None: it cannot)."""

    @abc.abstractmethod
    def snapshot(self, domain: str) -> dict:
        """What restoring this domain needs, JSON-ready (it goes into the journal)."""

    @abc.abstractmethod
    def set_max(self, domain: str, mhz: int) -> None: ...

    @abc.abstractmethod
    def restore(self, domain: str, record: dict) -> None: ...


def _check_domain(domain: str) -> None:
    if domain not in DOMAINS:
        raise ValueError(f"unknown clock domain {domain!r}")


class NvmlClocks(ClockControl):
    vendor = "nvidia"
    restore_kind = "reset"  # NVML cannot read a locked range back: reset to the default

    def __init__(self, device):
        super().__init__(device)
        self._nvml = device._nvml
        self._handle = device._handle

    def _errors(self, exc, what: str, mhz: int | None = None):
        nvml = self._nvml
        code = getattr(exc, "value", None)
        # "Non-admin users will see an NVML_ERROR_NO_PERMISSION error code when
        # invoking any of these methods" (NVML API reference, Device Commands).
        if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return PowerPermissionError(f"no permission to {what} of GPU {self.index}", ROOT_HINT)
        if code in (getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
                    getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)):
            # Locked GPU clocks: Volta or newer; locked memory clocks: Ampere or newer.
            return PowerError(f"GPU {self.index} does not support clock locking ({what})",
                              "drop --sm-clock/--mem-clock on this GPU")
        if code == getattr(nvml, "NVML_ERROR_INVALID_ARGUMENT", 2) and mhz is not None:
            return CapOutOfRangeError(f"NVML rejected {mhz} MHz for GPU {self.index}",
                                      "pick a supported clock (hpcai-launch power clocks lists them)")
        return PowerError(f"NVML could not {what} of GPU {self.index}: {exc}")

    def _call(self, name: str, *args, what: str, mhz: int | None = None):
        fn = getattr(self._nvml, name, None)
        if fn is None:
            raise PowerError(f"this nvidia-ml-py has no {name}", "install nvidia-ml-py 11.450 or newer")
        try:
            return fn(self._handle, *args)
        except self._nvml.NVMLError as exc:
            raise self._errors(exc, what, mhz) from exc

    def memory_clocks(self) -> list[int]:
        return sorted(int(v) for v in self._call("nvmlDeviceGetSupportedMemoryClocks",
                                                 what="read the supported memory clocks"))

    def supported(self, domain: str, mem_mhz: int | None = None) -> SupportedClocks:
        _check_domain(domain)
        mems = self.memory_clocks()
        if domain == "mem":
            return SupportedClocks(tuple(mems), min(mems, default=None), max(mems, default=None))
        # SM clocks are listed per memory clock; the highest one is the default.
        mem = mem_mhz if mem_mhz is not None else max(mems, default=None)
        if mem is None:
            return SupportedClocks((), None, None)
        values = sorted({int(v) for v in self._call(
            "nvmlDeviceGetSupportedGraphicsClocks", int(mem), what="read the supported SM clocks")})
        return SupportedClocks(tuple(values), min(values, default=None), max(values, default=None))

    def _clock_type(self, domain: str) -> int:
        return self._nvml.NVML_CLOCK_SM if domain == "sm" else self._nvml.NVML_CLOCK_MEM

    def current_mhz(self, domain: str) -> float | None:
        _check_domain(domain)
        return float(self._call("nvmlDeviceGetClockInfo", self._clock_type(domain),
                                what="read the clock"))

    def limit_mhz(self, domain: str) -> float | None:
        return None  # NVML has no getter for the locked clocks

    def snapshot(self, domain: str) -> dict:
        _check_domain(domain)
        # What NVML lets us read, for the record; restoring resets to the default.
        max_mhz = self._call("nvmlDeviceGetMaxClockInfo", self._clock_type(domain),
                             what="read the maximum clock")
        return {"restore": "reset", "max_mhz": int(max_mhz),
                "current_mhz": self.current_mhz(domain)}

    def set_max(self, domain: str, mhz: int) -> None:
        _check_domain(domain)
        # The lowest supported clock as the floor: the GPU idles down as usual.
        if domain == "sm":
            lowest = self.supported("sm").lo
            self._call("nvmlDeviceSetGpuLockedClocks", int(lowest or mhz), int(mhz),
                       what="lock the SM clock", mhz=mhz)
        else:
            lowest = self.supported("mem").lo
            self._call("nvmlDeviceSetMemoryLockedClocks", int(lowest or mhz), int(mhz),
                       what="lock the memory clock", mhz=mhz)

    def restore(self, domain: str, record: dict) -> None:
        _check_domain(domain)
        name = "nvmlDeviceResetGpuLockedClocks" if domain == "sm" else "nvmlDeviceResetMemoryLockedClocks"
        self._call(name, what=f"reset the {DOMAIN_NAMES[domain]} clock")


class AmdSmiClocks(ClockControl):
    vendor = "amd"
    restore_kind = "max_mhz"  # the old maximum, read from amdsmi_get_clock_info

    _LIMIT_NAMES = {"sm": "sclk", "mem": "mclk"}

    def __init__(self, device):
        super().__init__(device)
        self._amdsmi = device._amdsmi
        self._handle = device._handle

    def _clk_type(self, domain: str):
        kinds = self._amdsmi.AmdSmiClkType
        return kinds.GFX if domain == "sm" else kinds.MEM

    def _call(self, name: str, *args, what: str, mhz: int | None = None):
        from hpcai.gpu.amd import _call, _error_code, _status

        amdsmi = self._amdsmi
        fn = getattr(amdsmi, name, None)
        if fn is None:
            raise PowerError(f"this amdsmi has no {name}", "use the amdsmi of ROCm 6.2 or newer")
        try:
            return _call(fn, self._handle, *args)
        except amdsmi.AmdSmiLibraryException as exc:
            code = _error_code(exc)
            if code == _status(amdsmi, "NO_PERM"):
                raise PowerPermissionError(f"no permission to {what} of GPU {self.index}",
                                           ROOT_HINT) from exc
            if code in (_status(amdsmi, "NOT_SUPPORTED"), _status(amdsmi, "NOT_YET_IMPLEMENTED")):
                raise PowerError(f"GPU {self.index} does not support {what}",
                                 "drop --sm-clock/--mem-clock on this GPU") from exc
            if mhz is not None and code in (_status(amdsmi, "INVAL"),
                                            _status(amdsmi, "INPUT_OUT_OF_BOUNDS")):
                raise CapOutOfRangeError(f"amdsmi rejected {mhz} MHz for GPU {self.index}",
                                         "pick a clock in the supported range") from exc
            raise PowerError(f"amdsmi could not {what} of GPU {self.index}: {exc}") from exc
        except amdsmi.AmdSmiException as exc:
            raise PowerError(f"amdsmi could not {what} of GPU {self.index}: {exc}") from exc

    def supported(self, domain: str, mem_mhz: int | None = None) -> SupportedClocks:
        _check_domain(domain)
        freq = self._call("amdsmi_get_clk_freq", self._clk_type(domain),
                          what="read the supported clocks") or {}
        levels = [int(round(f / 1e6)) for f in (freq.get("frequency") or [])
                  if isinstance(f, (int, float))]  # Hz -> MHz
        return SupportedClocks(None, min(levels, default=None), max(levels, default=None))

    def _info(self, domain: str) -> dict:
        return self._call("amdsmi_get_clock_info", self._clk_type(domain),
                          what="read the clock") or {}

    @staticmethod
    def _mhz(value) -> float | None:
        # "N/A" (a string) where the wrapper could not read it.
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def current_mhz(self, domain: str) -> float | None:
        _check_domain(domain)
        info = self._info(domain)
        return self._mhz(info.get("clk", info.get("cur_clk")))

    def limit_mhz(self, domain: str) -> float | None:
        _check_domain(domain)
        return self._mhz(self._info(domain).get("max_clk"))

    def snapshot(self, domain: str) -> dict:
        limit = self.limit_mhz(domain)
        if limit is None:
            raise PowerError(f"GPU {self.index} does not report its {DOMAIN_NAMES[domain]} clock "
                             "range, so it could not be restored", "drop --sm-clock/--mem-clock")
        return {"restore": "max_mhz", "mhz": int(limit), "current_mhz": self.current_mhz(domain)}

    def set_max(self, domain: str, mhz: int) -> None:
        _check_domain(domain)
        self._call("amdsmi_set_gpu_clk_limit", self._LIMIT_NAMES[domain], "max", int(mhz),
                   what=f"set the {DOMAIN_NAMES[domain]} clock limit", mhz=mhz)

    def restore(self, domain: str, record: dict) -> None:
        self.set_max(domain, int(record["mhz"]))
        got = self.limit_mhz(domain)
        if got is None or abs(got - float(record["mhz"])) > 1:
            raise PowerError(f"GPU {self.index} reads a {DOMAIN_NAMES[domain]} clock limit of "
                             f"{got} MHz after restoring {record['mhz']} MHz")


def clock_control(device) -> ClockControl:
    """The clock control for a device of hpcai.gpu.nvidia or hpcai.gpu.amd."""
    from hpcai.gpu.amd import AmdDevice
    from hpcai.gpu.nvidia import NvidiaDevice

    if isinstance(device, NvidiaDevice):
        return NvmlClocks(device)
    if isinstance(device, AmdDevice):
        return AmdSmiClocks(device)
    raise PowerError(f"GPU {getattr(device, 'index', '?')}: clocks can be capped only through "
                     "NVML or amdsmi")
