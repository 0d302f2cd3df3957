"""Workload power profiles: the third knob beside power caps and clock caps.

NVIDIA (nvidia-ml-py 13.615.71, pynvml.py:7479-7597; NVML API reference,
"Power Profile Information", group__nvmlPowerProfiles): a GPU offers a set of
profiles (``nvmlDeviceWorkloadPowerProfileGetProfilesInfo``: the struct
``c_nvmlWorkloadPowerProfileProfilesInfo_v1_t``, version
``nvmlWorkloadPowerProfileProfilesInfo_v1``, whose ``perfProfilesMask`` has a
bit per profile the GPU has). A user requests some
(``nvmlDeviceWorkloadPowerProfileSetRequestedProfiles``: adds the mask's
profiles to those requested; ``...ClearRequestedProfiles``: removes them; both
take ``c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t``), and the driver
arbitrates between conflicting ones:
``nvmlDeviceWorkloadPowerProfileGetCurrentProfiles`` reads the requested and
the enforced masks (``c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t``). A mask
is ``c_nvmlMask255_t``: 8 unsigned ints, bit ``id % 32`` of word ``id // 32``.
Boards and drivers without them answer NVML_ERROR_NOT_SUPPORTED; a driver older
than the calls lacks the symbol (NVML_ERROR_FUNCTION_NOT_FOUND from
pynvml's _nvmlGetFunctionPointer). Setting needs root (NO_PERMISSION).
Driver 590 adds ``nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1`` and
deprecates Set/Clear "to be removed in CUDA 15.0" (NVML change log v580->v590);
the deprecated pair is what every driver with profiles has, so hpcai uses it.

hpcai runs with exactly one profile requested: the snapshot is the requested
mask before the run, setting clears the others and requests ours, restoring
clears ours and requests the old mask again, then reads it back.

AMD (amdsmi 7.0.2, amdsmi_interface.py, ``amdsmi_get_gpu_perf_level`` /
``amdsmi_set_gpu_perf_determinism_mode`` / ``amdsmi_set_gpu_perf_level``):
performance determinism, "determinism-MHZ" here, pins the GFX clock's soft
maximum at MHZ so that every GPU runs at the same clock
(``amdsmi_set_gpu_perf_determinism_mode(h, clkvalue)``, clkvalue an int in MHz).
The perf level in force is readable (``amdsmi_get_gpu_perf_level`` returns a
name, "AMDSMI_DEV_PERF_LEVEL_AUTO", ..., "..._DETERMINISM"): the snapshot is
that level, the read-back that the level is DETERMINISM, and restoring sets the
old level back (``amdsmi_set_gpu_perf_level(h, AmdSmiDevPerfLevel.X)``) and reads
it back. A GPU already in determinism mode is refused: its soft maximum cannot
be read, so it could not be put back. MHZ must lie within the GFX clock's DPM
levels (``amdsmi_get_clk_freq``). amdsmi cannot say whether a board supports
determinism without trying: a board that refuses the set (NOT_SUPPORTED) is
rolled back and reported in one line.
"""
from __future__ import annotations

import ctypes
import re

from hpcai.errors import PowerError, PowerPermissionError, UsageError

# NVML_POWER_PROFILE_* (pynvml.py:7485-7509), by id; the name is how hpcai spells it.
PROFILE_IDS = {
    "max-p": 0, "max-q": 1, "compute": 2, "memory-bound": 3, "network": 4, "balanced": 5,
    "llm-inference": 6, "llm-training": 7, "rbm": 8, "dcpcie": 9, "hmma-sparse": 10,
    "hmma-dense": 11, "sync-balanced": 12, "hpc": 13, "mig": 14, "max-q-1": 15,
    "network-bound": 16, "high-throughput-inference": 17, "medium-throughput-inference": 18,
    "low-latency-inference": 19, "training": 20, "inference": 21, "max-q-2": 22, "max-q-3": 23,
    "low-priority-background": 24,
}
PROFILE_NAMES = {v: k for k, v in PROFILE_IDS.items()}
DETERMINISM = re.compile(r"^determinism-([0-9]{1,5})$")  # AMD: determinism-MHZ
PERF_LEVEL_PREFIX = "AMDSMI_DEV_PERF_LEVEL_"
ROOT_HINT = "run as root (requesting a power profile needs it)"
DROP_HINT = "drop --power-profile on this GPU"


def profile_name(text: str) -> str:
    """A profile's hpcai name from what a user typed (any case, '-' or '_');
    UsageError, in one line with the names, for an unknown one."""
    name = str(text).strip().lower().replace("_", "-")
    if name not in PROFILE_IDS and not DETERMINISM.match(name):
        raise UsageError(f"--power-profile {text!r} is not an NVML workload power profile "
                         "nor AMD's determinism-MHZ",
                         f"choose from: {', '.join(PROFILE_IDS)}; on AMD: determinism-MHZ")
    return name


def mask_ids(mask) -> list[int]:
    """The profile ids whose bit is set in a c_nvmlMask255_t."""
    words = list(mask.mask)
    return [w * 32 + b for w, word in enumerate(words) for b in range(32) if int(word) >> b & 1]


def mask_names(mask) -> list[str]:
    return [PROFILE_NAMES.get(i, f"profile-{i}") for i in mask_ids(mask)]


def fill_mask(mask, ids) -> None:
    for w in range(len(mask.mask)):
        mask.mask[w] = 0
    for i in ids:
        mask.mask[i // 32] |= 1 << (i % 32)


class NvmlProfiles:
    """Read, request and restore the workload power profiles of one NVIDIA GPU."""

    vendor = "nvidia"

    def __init__(self, device):
        self.device, self.index = device, device.index
        self._nvml, self._handle = device._nvml, device._handle

    def _error(self, exc, what: str) -> PowerError:
        nvml, code = self._nvml, getattr(exc, "value", None)
        if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return PowerPermissionError(f"no permission to {what} of GPU {self.index}", ROOT_HINT)
        if code in (getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
                    getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)):
            return PowerError(f"GPU {self.index} or its driver has no workload power profiles "
                              f"(NVML: {exc})", DROP_HINT)
        return PowerError(f"NVML could not {what} of GPU {self.index}: {exc}")

    def _call(self, name: str, struct: str, what: str, ids=None):
        """The NVML call `name` on a new versioned struct (ids: its request mask)."""
        fn, make = getattr(self._nvml, name, None), getattr(self._nvml, struct, None)
        if fn is None or make is None:
            raise PowerError(f"this nvidia-ml-py has no {name}", "install nvidia-ml-py 12.570 or newer")
        arg = make()
        if ids is not None:
            fill_mask(arg.requestedProfilesMask, ids)
        try:
            fn(self._handle, ctypes.byref(arg))
        except self._nvml.NVMLError as exc:
            raise self._error(exc, what) from exc
        return arg

    def problem(self, name: str) -> str | None:
        """Why this GPU cannot take the profile (None: it can)."""
        offered = self.available()
        if name in offered:
            return None
        return (f"--power-profile {name} is not offered by GPU {self.index}: it offers "
                f"{', '.join(offered) or 'none'} (`hpcai-launch power profiles` lists them)")

    @staticmethod
    def in_force(name: str, now: dict) -> tuple[bool, bool]:
        """(exactly it is requested, the driver enforces it)."""
        return now["requested"] == [name], name in now["enforced"]

    def available(self) -> list[str]:
        info = self._call("nvmlDeviceWorkloadPowerProfileGetProfilesInfo",
                          "c_nvmlWorkloadPowerProfileProfilesInfo_v1_t", "read the power profiles")
        return mask_names(info.perfProfilesMask)

    def current(self) -> dict:
        """{"requested": [names], "enforced": [names]}: what is asked for and what
        the driver enforces after arbitrating between them."""
        now = self._call("nvmlDeviceWorkloadPowerProfileGetCurrentProfiles",
                         "c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t", "read the power profile")
        return {"requested": mask_names(now.requestedProfilesMask),
                "enforced": mask_names(now.enforcedProfilesMask)}

    def snapshot(self) -> dict:
        """What restoring needs, JSON-ready (it goes into the journal)."""
        return {"restore": "requested", "requested": self.current()["requested"]}

    def _request(self, ids, clear: bool) -> None:
        if not ids:
            return
        name = ("nvmlDeviceWorkloadPowerProfileClearRequestedProfiles" if clear
                else "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles")
        self._call(name, "c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t",
                   "clear power profiles" if clear else "request a power profile", ids=ids)

    def apply(self, name: str) -> None:
        """Exactly `name` requested: the others cleared first."""
        want = PROFILE_IDS[name]
        others = [PROFILE_IDS.get(n) for n in self.current()["requested"] if n != name]
        self._request([i for i in others if i is not None], clear=True)
        self._request([want], clear=False)

    def restore(self, record: dict) -> None:
        """The requested profiles of the snapshot back, then read back."""
        old = [PROFILE_IDS[n] for n in record.get("requested") or [] if n in PROFILE_IDS]
        now = [PROFILE_IDS[n] for n in self.current()["requested"] if n in PROFILE_IDS]
        self._request([i for i in now if i not in old], clear=True)
        self._request([i for i in old if i not in now], clear=False)
        got = sorted(self.current()["requested"])
        if got != sorted(record.get("requested") or []):
            raise PowerError(f"GPU {self.index} requests the power profiles {got or 'none'} "
                             f"after restoring {record.get('requested') or 'none'}")


class AmdDeterminism:
    """Read, set and restore the performance determinism of one AMD GPU."""

    vendor = "amd"

    def __init__(self, device):
        self.device, self.index = device, device.index
        self._amdsmi, self._handle = device._amdsmi, device._handle

    def _call(self, name: str, *args, what: str):
        from hpcai.gpu.amd import _call, _error_code, _status

        amdsmi = self._amdsmi
        fn = getattr(amdsmi, name, None)
        if fn is None:
            raise PowerError(f"this amdsmi has no {name}", "use the amdsmi of ROCm 6.1 or newer")
        try:
            return _call(fn, self._handle, *args)
        except amdsmi.AmdSmiLibraryException as exc:
            code = _error_code(exc)
            if code == _status(amdsmi, "NO_PERM"):
                raise PowerPermissionError(f"no permission to {what} of GPU {self.index}", ROOT_HINT) from exc
            if code in (_status(amdsmi, "NOT_SUPPORTED"), _status(amdsmi, "NOT_YET_IMPLEMENTED")):
                raise PowerError(f"GPU {self.index} or its driver has no performance determinism "
                                 f"(amdsmi: {exc})", DROP_HINT) from exc
            raise PowerError(f"amdsmi could not {what} of GPU {self.index}: {exc}") from exc
        except amdsmi.AmdSmiException as exc:
            raise PowerError(f"amdsmi could not {what} of GPU {self.index}: {exc}") from exc

    def level(self) -> str:
        """The perf level in force, as "auto", "determinism", ..."""
        name = str(self._call("amdsmi_get_gpu_perf_level", what="read the performance level"))
        return name.removeprefix(PERF_LEVEL_PREFIX).lower()

    def _gfx_range(self) -> tuple[int | None, int | None]:
        from hpcai.gpu.clocks import AmdSmiClocks

        supported = AmdSmiClocks(self.device).supported("sm")
        return supported.lo, supported.hi

    def available(self) -> list[str]:
        lo, hi = self._gfx_range()
        self.level()  # a board whose perf level cannot be read has no determinism here
        return [f"determinism-{lo}..{hi}"] if lo is not None else []

    def problem(self, name: str) -> str | None:
        match = DETERMINISM.match(name)
        if not match:
            return (f"--power-profile {name} is an NVML profile and GPU {self.index} is AMD: "
                    "use determinism-MHZ (performance determinism) on AMD")
        level, (lo, hi) = self.level(), self._gfx_range()
        if level == "determinism":
            return (f"GPU {self.index} is already in performance determinism mode, whose clock "
                    "cannot be read to be put back: set it to auto first (amd-smi set --perf-level AUTO)")
        mhz = int(match.group(1))
        if lo is None or not lo <= mhz <= hi:
            return f"--power-profile {name}: {mhz} MHz is outside GPU {self.index}'s GFX clock range {lo}-{hi} MHz"
        return None

    @staticmethod
    def in_force(name: str, now: dict) -> tuple[bool, bool]:
        return now["requested"] == ["determinism"], now["enforced"] == ["determinism"]

    def current(self) -> dict:
        level = self.level()
        return {"requested": [level], "enforced": [level]}

    def snapshot(self) -> dict:
        return {"restore": "perf_level", "requested": [self.level()]}

    def apply(self, name: str) -> None:
        mhz = int(DETERMINISM.match(name).group(1))
        self._call("amdsmi_set_gpu_perf_determinism_mode", mhz, what="set performance determinism")

    def restore(self, record: dict) -> None:
        old = record["requested"][0]
        level = getattr(self._amdsmi.AmdSmiDevPerfLevel, old.upper(), None)
        if level is None:
            raise PowerError(f"GPU {self.index}: this amdsmi has no performance level {old!r}")
        self._call("amdsmi_set_gpu_perf_level", level, what="restore the performance level")
        got = self.level()
        if got != old:
            raise PowerError(f"GPU {self.index} reads performance level {got} after restoring {old}")


def profile_control(device) -> NvmlProfiles | AmdDeterminism:
    """The profile control of a device of hpcai.gpu.nvidia or hpcai.gpu.amd."""
    from hpcai.gpu.amd import AmdDevice
    from hpcai.gpu.nvidia import NvidiaDevice

    if isinstance(device, NvidiaDevice):
        return NvmlProfiles(device)
    if isinstance(device, AmdDevice):
        return AmdDeterminism(device)
    raise PowerError(f"GPU {getattr(device, 'index', '?')}: power profiles are set only through NVML or amdsmi")
