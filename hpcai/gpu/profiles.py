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

AMD: amdsmi's performance determinism (``amdsmi_set_gpu_perf_determinism_mode``)
is not driven yet: a profile on an AMD GPU is refused (see profile_control).
"""
from __future__ import annotations

import ctypes

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
ROOT_HINT = "run as root (requesting a power profile needs it)"
DROP_HINT = "drop --power-profile on this GPU"


def profile_name(text: str) -> str:
    """A profile's hpcai name from what a user typed (any case, '-' or '_');
    UsageError, in one line with the names, for an unknown one."""
    name = str(text).strip().lower().replace("_", "-")
    if name not in PROFILE_IDS:
        raise UsageError(f"--power-profile {text!r} is not an NVML workload power profile",
                         f"choose from: {', '.join(PROFILE_IDS)}")
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


def profile_control(device) -> NvmlProfiles:
    """The profile control of a device of hpcai.gpu.nvidia; AMD is refused in one line."""
    from hpcai.gpu.amd import AmdDevice
    from hpcai.gpu.nvidia import NvidiaDevice

    if isinstance(device, NvidiaDevice):
        return NvmlProfiles(device)
    if isinstance(device, AmdDevice):
        raise UsageError(f"--power-profile sets NVML workload power profiles; GPU {device.index} is "
                         "AMD, whose performance determinism hpcai does not drive yet",
                         "drop --power-profile on AMD GPUs (use --cap or --sm-clock)")
    raise PowerError(f"GPU {getattr(device, 'index', '?')}: power profiles are set only through NVML")
