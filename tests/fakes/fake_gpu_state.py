"""Shared state of the FAKE vendor libraries in this folder (tests only).

The fakes (``pynvml.py``, ``amdsmi.py``) keep no device state in memory: every
call reads, and every set writes, one JSON file named by the environment
variable ``HPCAI_FAKE_GPU_STATE``. So the launcher, a workload subprocess and
the test itself all see one simulated node, and a test can read back what
limits were set.

State file schema (format 1)::

    {
      "format": 1,
      "driver_version": "550.54.15",        # nvmlSystemGetDriverVersion / amdsmi driver
      "nvml_version": "12.550.54.15",
      "cuda_driver_version": 12040,          # nvmlSystemGetCudaDriverVersion_v2
      "amdsmi_version": [25, 3, 0],          # amdsmi_get_lib_version major/minor/release
      "devices": [ {                          # one entry per GPU, in library order
        "vendor": "nvidia" | "amd",          # pynvml sees only "nvidia", amdsmi only "amd"
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-...",
        "serial": "1654923001234",           # nvmlDeviceGetSerial / amdsmi asic_serial
        "pci_bus_id": "00000000:18:00.0",
        "memory_total_bytes": int, "memory_used_bytes": int,
        "power_draw_w": float,               # what the GPU would draw without a cap
        "ignores_cap": false,                # true: reported power is draw even above the cap
        "instant_ripple_frac": 0.0,          # the instant field swings +-this share around it
        "min_limit_w": float, "max_limit_w": float,
        "default_limit_w": float, "current_limit_w": float,
        "deny_set": false,                   # set (limits and clocks) -> NoPermission / NO_PERM
        "ignore_set": false,                 # set returns OK but the limit does not change
        "energy_mj": float, "energy_t": float,  # energy folded up to unix time energy_t
        "sm_clock_mhz": float, "memory_clock_mhz": float,
        "temperature_c": float, "utilization_pct": float,
        "throttle_reasons": int,             # NVML clocks-event bitmask
        "not_supported": [str],              # features that raise NotSupported, see below
        "na_fields": [str],                  # amdsmi power_info keys reported as "N/A"
        "legacy_energy_key": false,          # amdsmi < 6.2.1: counter under key "power"
        "legacy_clock_key": false,           # older amdsmi: clock under "cur_clk", not "clk"
        "hip_id": int | null,                # amdsmi enumeration hip_id (null: call fails)
        "inaccessible": null | "no_permission" | "gpu_is_lost",  # NVML handle fails (cgroup)
        "errors": {feature: int},            # a metric fails with this NVML code / amdsmi status
        "error_fraction": {feature: float},  # NVIDIA: this share of its calls fails (UNKNOWN)
        "mig": null | ["MIG-..."],           # MIG mode on, with these MIG device UUIDs
        "enforced_limit_w": float | null,    # a BMC/site limit below the set limit
        "settle_s": float,                   # NVIDIA: a set limit or clock lock takes effect this late
        "previous_limit_w": float, "limit_set_t": float,  # kept by each set while settle_s > 0
        "previous_clock_limits": {domain: [lo, hi] | null}, "clock_set_t": {domain: float},
        "energy_frozen": false,              # the counter stops (ROCm/amdsmi#38)
        "energy_step_mj": float,             # added to the counter (negative: runs backwards)
        "violation": {key: int},             # amdsmi_get_violation_status overrides
        "set_log": [{"watts": float, "t": float, "result": "ok"|"denied"|"ignored"|"invalid"}],
        # Clock caps (hpcai.gpu.clocks): NVIDIA lists every supported value,
        # AMD its DPM levels (any MHz between the lowest and highest is accepted).
        "supported_mem_clocks_mhz": [int],   # NVIDIA: nvmlDeviceGetSupportedMemoryClocks
        "supported_sm_clocks_mhz": [int],    # NVIDIA: ...SupportedGraphicsClocks (any memory clock)
        "sm_clock_levels_mhz": [int],        # AMD: amdsmi_get_clk_freq(GFX), in MHz here
        "mem_clock_levels_mhz": [int],       # AMD: amdsmi_get_clk_freq(MEM)
        "clock_limits": {"sm": [lo, hi] | null, "mem": [lo, hi] | null},  # locked / soft range
        "ignore_clock_set": false,           # a clock set "succeeds" but changes nothing
        "clock_log": [{"domain": str, "action": "lock"|"reset"|"max", "mhz": .., "result": str}]
        # Workload power profiles (NVIDIA; hpcai.gpu.profiles), NVML_POWER_PROFILE_* ids.
        # Absent "power_profiles": the board has none (NOT_SUPPORTED).
        "power_profiles": [int],             # offered: ...GetProfilesInfo's perfProfilesMask
        "requested_profiles": [int],         # requested now (Set adds, Clear removes)
        "profile_conflicts": {id: [int]},    # enforced: requested minus those a lower id conflicts with
        "ignore_profile_set": false,         # requests succeed but nothing is enforced
        "profile_log": [{"action": "set"|"clear", "ids": [int], "result": str}]
        # AMD performance determinism (hpcai.gpu.profiles.AmdDeterminism).
        "perf_level": "AUTO",                # AmdSmiDevPerfLevel name in force
        "determinism_mhz": int | null,       # the GFX soft maximum in DETERMINISM
        "ignore_perf_set": false,            # level sets succeed but change nothing
        "perf_log": [{"level": str, "mhz": int | null, "result": str}]
      } ]
    }

The clock a GPU reports is ``min(sm_clock_mhz, the locked/soft maximum)``
(likewise for memory): a clock cap shows in the sampled clocks.

With ``settle_s``, the limit in force (nvmlDeviceGetEnforcedPowerLimit) and a
locked clock follow a set only after that many seconds, while the requested
limit (nvmlDeviceGetPowerManagementLimit) reads the new value at once. So it
was on an H100 80GB HBM3, driver 580.159.04 (hpcai's first GPU run,
2026-11-27): the enforced limit read the previous cap 9 ms after the set and
followed within 14-101 ms, and a busy GPU still ran at 1980 MHz right after
nvmlDeviceSetGpuLockedClocks(1410, 1410).

Reported power is ``min(power_draw_w, current_limit_w)`` unless
``ignores_cap``. With ``instant_ripple_frac`` the instant field (pynvml's
NVML_FI_DEV_POWER_INSTANT) swings around it as a 3.7 Hz sine of that share,
while the 1 s average (nvmlDeviceGetPowerUsage) and the energy counter stay on
it: so it was on the H100 at its 700 W default (the GPU kit, 2026-11-28), an
instant p95 of 759-828 W and a 1 s mean held at the limit.
The energy counter grows with wall time times reported
power: ``energy_mj + (now - energy_t) * power * 1000``; every change that
alters the reported power first folds the energy up to now.

Feature names for ``not_supported``: "power_instant", "power_average",
"energy", "sm_clock", "memory_clock", "temperature", "temperature_hotspot",
"utilization", "memory_used", "throttle", "enforced_limit", "default_limit",
"constraints", "current_limit", "set_limit", "cuda_version", "power_cap_info",
"field_values", "mig", "violation", "gpu_metrics", "supported_clocks",
"clock_lock" (setting or resetting clocks), "power_profiles" (every profile call),
"perf_level" (AMD: reading or setting the perf level), "perf_determinism" (AMD: setting it),
"serial" (NVML: nvmlDeviceGetSerial
raises NotSupported, as on GeForce parts; amdsmi: asic_serial is "N/A").

Top-level keys: "removed_functions" (NVML symbols the driver lacks: calls raise
FunctionNotFound), "amd_na_value" (what amdsmi reports for an unsupported
field: "N/A" by default; 0xFFFF or 0xFFFFFFFF as some wrapper/library pairs
pass through, see amdsmi.py).

Helpers: ``make_devices``, ``write_state``, ``read_state``, ``update_device``,
``load_fake_module`` (load a fake under its real name without putting this
folder on ``sys.path``) and ``install`` (all of it for an in-process test).
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
import uuid as uuid_module
import zlib
from pathlib import Path

ENV = "HPCAI_FAKE_GPU_STATE"
HERE = Path(__file__).resolve().parent


def make_devices(n: int = 2, vendor: str = "nvidia", node: str | None = None, **overrides) -> list[dict]:
    """n default devices of one vendor; overrides apply to every device.

    node: 8 hex digits in every UUID, random by default: a real node's GPUs have
    unique UUIDs, and the launcher's node-wide lock (/run/hpcai, keyed by UUID)
    must never make two tests' fake nodes contend."""
    node = node or uuid_module.uuid4().hex[:8]
    devices = []
    for i in range(n):
        if vendor == "nvidia":
            dev = {
                "vendor": "nvidia",
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": f"GPU-{node}-0000-4000-8000-{i:012d}",
                # 13 digits, as on NVIDIA data-centre boards (nvidia-smi -q "Serial Number").
                "serial": f"16549{zlib.crc32(node.encode()) % 10**5:05d}{i:03d}",
                "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                "memory_total_bytes": 80 * 1024**3,
                "memory_used_bytes": 1024**3,
                "power_draw_w": 650.0,
                "min_limit_w": 200.0,
                "max_limit_w": 700.0,
                "default_limit_w": 700.0,
                "current_limit_w": 700.0,
                "sm_clock_mhz": 1980.0,
                "memory_clock_mhz": 2619.0,
                "na_fields": [],
                # H100 SXM: one HBM3 clock, SM clocks 345-1980 MHz in 15 MHz steps
                # (nvidia-smi -q -d SUPPORTED_CLOCKS).
                "supported_mem_clocks_mhz": [2619],
                "supported_sm_clocks_mhz": list(range(1980, 344, -15)),
            }
        elif vendor == "amd":
            dev = {
                "vendor": "amd",
                "name": "AMD Instinct MI300X",
                "uuid": f"{node}-{i:04x}-1000-8000-0000000000{i:02x}",
                "serial": f"0x{zlib.crc32(node.encode()):08X}{i:08X}",
                "pci_bus_id": f"0000:{0x0C + 0x10 * i:02x}:00.0",
                "memory_total_bytes": 192 * 1024**3,
                "memory_used_bytes": 1024**3,
                "power_draw_w": 700.0,
                "min_limit_w": 200.0,
                "max_limit_w": 750.0,
                "default_limit_w": 750.0,
                "current_limit_w": 750.0,
                "sm_clock_mhz": 2100.0,
                "memory_clock_mhz": 1300.0,
                # MI300X reports no average socket power (facts.md).
                "na_fields": ["average_socket_power"],
                "hip_id": i,
                # MI300X: pp_dpm_sclk / pp_dpm_mclk levels.
                "sm_clock_levels_mhz": [500, 1400, 2100],
                "mem_clock_levels_mhz": [900, 1100, 1300],
            }
        else:
            raise ValueError(f"unknown vendor {vendor!r}")
        dev.update(
            ignores_cap=False,
            deny_set=False,
            ignore_set=False,
            energy_mj=0.0,
            temperature_c=45.0,
            utilization_pct=0.0,
            throttle_reasons=0,
            not_supported=[],
            legacy_energy_key=False,
            set_log=[],
            clock_limits={"sm": None, "mem": None},
            ignore_clock_set=False,
            clock_log=[],
        )
        dev.update(overrides)
        devices.append(dev)
    return devices


def write_state(path, devices: list[dict], **top) -> dict:
    """Write a fresh state file (atomically) and return it."""
    now = time.time()
    state = {
        "format": 1,
        "driver_version": "550.54.15",
        "nvml_version": "12.550.54.15",
        "cuda_driver_version": 12040,
        "amdsmi_version": [25, 3, 0],
        "devices": [dict(d, energy_t=d.get("energy_t", now)) for d in devices],
    }
    state.update(top)
    with _locked(path):
        _write(path, state)
    return state


def read_state(path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _settling(dev: dict, set_t: float | None) -> bool:
    """A set made at set_t has not taken effect yet (settle_s)."""
    return set_t is not None and time.time() - set_t < float(dev.get("settle_s") or 0.0)


def enforced_limit_w(dev: dict) -> float:
    """The limit in force: the set one (the one before while it settles), or a
    lower out-of-band (BMC/site) one."""
    own = dev["current_limit_w"]
    if _settling(dev, dev.get("limit_set_t")):
        own = dev.get("previous_limit_w", own)
    other = dev.get("enforced_limit_w")
    return float(own if other is None else min(other, own))


def clock_mhz(dev: dict, domain: str) -> float:
    """The clock the GPU runs at: its own, held under a locked or soft maximum
    (the one before while a lock settles)."""
    natural = float(dev["sm_clock_mhz"] if domain == "sm" else dev["memory_clock_mhz"])
    limit = (dev.get("clock_limits") or {}).get(domain)
    if _settling(dev, (dev.get("clock_set_t") or {}).get(domain)):
        limit = (dev.get("previous_clock_limits") or {}).get(domain)
    return natural if not limit else min(natural, float(limit[1]))


def reported_power_w(dev: dict) -> float:
    if dev.get("ignores_cap"):
        return float(dev["power_draw_w"])
    return float(min(dev["power_draw_w"], enforced_limit_w(dev)))


RIPPLE_HZ = 3.7  # not a multiple of a 10 Hz sampler's rate: every phase gets read


def instant_power_w(dev: dict, now: float | None = None) -> float:
    """The instant field: reported power, with its ripple (a sine averaging out
    over the limit's 1 s window to within 3% of the ripple)."""
    ripple = float(dev.get("instant_ripple_frac") or 0.0)
    now = time.time() if now is None else now
    return reported_power_w(dev) * (1.0 + ripple * math.sin(2 * math.pi * RIPPLE_HZ * now))


def energy_mj(dev: dict, now: float | None = None) -> float:
    """What the counter reads: a frozen counter stays where it stopped."""
    return _true_energy_mj(dev, now) + float(dev.get("energy_step_mj", 0.0))


def _true_energy_mj(dev: dict, now: float | None = None) -> float:
    if dev.get("energy_frozen"):
        return dev["energy_mj"]
    now = time.time() if now is None else now
    return dev["energy_mj"] + max(0.0, now - dev["energy_t"]) * reported_power_w(dev) * 1000.0


def fold_energy(dev: dict, now: float | None = None) -> None:
    """Bring the stored counter up to now before the reported power changes."""
    now = time.time() if now is None else now
    dev["energy_mj"] = _true_energy_mj(dev, now)
    dev["energy_t"] = now


def update_device(path, index: int, **changes) -> dict:
    """Change one device (e.g. power_draw_w=300) with the energy folded first."""

    def apply(state):
        dev = state["devices"][index]
        fold_energy(dev)
        dev.update(changes)
        return dev

    return modify(path, apply)


def modify(path, fn):
    """Read-modify-write under an exclusive lock; fn mutates the state in place."""
    with _locked(path):
        state = read_state(path)
        result = fn(state)
        _write(path, state)
    return result


def state_path() -> str | None:
    """The state file; a "{node}" in it is this Slurm node's name (SLURMD_NODENAME,
    else the hostname), so each node of the test cluster, all on one machine, has
    its own GPUs as real nodes do."""
    path = os.environ.get(ENV) or None
    if path and "{node}" in path:
        import socket

        path = path.replace("{node}", os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    return path


def load_fake_module(name: str):
    """A fresh instance of the fake ``pynvml`` or ``amdsmi`` module, not registered."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(monkeypatch, path, devices: list[dict], **top) -> dict:
    """In-process setup for a test: write the state, point the env at it, and
    put fresh fake ``pynvml``/``amdsmi`` modules in sys.modules (undone by
    monkeypatch). Returns {"pynvml": module, "amdsmi": module}."""
    write_state(path, devices, **top)
    monkeypatch.setenv(ENV, str(path))
    modules = {name: load_fake_module(name) for name in ("pynvml", "amdsmi")}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules


@contextlib.contextmanager
def _locked(path):
    # A sibling lock file, so readers of the state file itself never block.
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(path, state: dict) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".fake-gpu-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, path)

