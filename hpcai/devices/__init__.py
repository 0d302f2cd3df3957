"""The device table: datasheet figures per accelerator model (gpus.toml) and
what this host's CPU is (cpu.py). Data lives in the TOML file; this module only
reads it and matches the names drivers report, exactly (the whole name,
case and spacing aside: hpcai.measure.gpu_names.normalize)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from hpcai.measure import gpu_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

# What a run's precision means for the peak it can reach: mixed precision does
# its matrix products in the half type; plain fp32 runs on the FP32 units (on
# AMD, FP32 matrix cores).
PRECISION_PEAK = {"bf16-mixed": "bf16", "bf16-true": "bf16", "fp16-mixed": "fp16", "tf32": "tf32",
                  "fp32": "fp32", "fp64": "fp64"}


def peak_precision(run_precision: str | None) -> str | None:
    """The table's precision column for a run's precision setting."""
    if not run_precision:
        return None
    return PRECISION_PEAK.get(run_precision, run_precision)


@dataclass(frozen=True)
class Device:
    model: str
    vendor: str
    names: tuple[str, ...]
    tflops: dict  # precision -> dense TFLOP/s of one device
    source: str
    url: str
    memory_gb: float | None = None
    bandwidth_tbs: float | None = None
    tdp_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    sm_count: int | None = None
    boost_mhz: float | None = None
    interconnect: str | None = None
    note: str = ""
    kind: str = field(default="gpu")

    def balance(self, precision: str) -> float | None:
        """FLOP per byte at which the roofline bends: peak over bandwidth."""
        peak = self.tflops.get(precision)
        if peak is None or not self.bandwidth_tbs:
            return None
        return peak / self.bandwidth_tbs


def _key(name: str) -> str:
    return gpu_names.normalize(name)


@lru_cache(maxsize=1)
def gpus() -> tuple[Device, ...]:
    text = resources.files(__name__).joinpath("gpus.toml").read_text(encoding="utf-8")
    table = tomllib.loads(text)
    devices = []
    for row in table["gpu"]:
        unknown = set(row["tflops"]) - set(PRECISIONS)
        if unknown:
            raise ValueError(f"gpus.toml: {row['model']}: unknown precision {sorted(unknown)}")
        devices.append(Device(**{**row, "names": tuple(row["names"]), "tflops": dict(row["tflops"])}))
    return tuple(devices)


@lru_cache(maxsize=1)
def _by_name() -> dict[str, tuple[Device, ...]]:
    """Name -> the entries that claim it. Variants of one model may share a
    driver name ("NVIDIA H100": the 80 GB HBM3 and the 94 GB HBM2e parts) when
    their memory sizes tell them apart; the first listed is the default."""
    index: dict[str, list[Device]] = {}
    for device in gpus():
        for name in dict.fromkeys((device.model, *device.names)):
            claimed = index.setdefault(_key(name), [])
            clash = next((d for d in claimed if d.memory_gb == device.memory_gb), None)
            if clash is not None:
                raise ValueError(f"gpus.toml: the name {name!r} is claimed by {clash.model} and "
                                 f"{device.model} with the same memory size")
            claimed.append(device)
    return {k: tuple(v) for k, v in index.items()}


# A reported memory total within this share of a datasheet size names that size:
# drivers report usable GiB (81559 MiB for an 80 GB HBM3 H100, 97871 MiB at 94 GB).
MEMORY_MATCH_FRAC = 0.12


def lookup(name: str | None, memory_bytes: int | None = None) -> Device | None:
    """The table's entry for a reported device name; exact, never a substring.
    Where variants share the name, memory_bytes (the driver's total) picks the
    one of that size; without it, the first listed."""
    if not name:
        return None
    found = _by_name().get(_key(name))
    if not found:
        return None
    if len(found) == 1 or not memory_bytes:
        return found[0]
    return variant(found, memory_bytes / 1e9) or found[0]


def variant(candidates, memory_gb: float) -> Device | None:
    """The candidate whose datasheet memory is nearest memory_gb (decimal GB),
    if within MEMORY_MATCH_FRAC of it."""
    sized = [d for d in candidates if d.memory_gb]
    if not sized:
        return None
    best = min(sized, key=lambda d: abs(d.memory_gb - memory_gb))
    return best if abs(best.memory_gb - memory_gb) <= MEMORY_MATCH_FRAC * best.memory_gb else None


def by_family(family: str, memory_gb: float, bandwidth_tbs: float | None = None) -> Device | None:
    """The entry for a model family as a paper prints it ("H100", 94 GB,
    2.4 TB/s): the family as a whole word of the model or a name, the memory
    size exact, and the bandwidth where given; the first listed on a tie."""
    for device in gpus():
        named = any(gpu_names.matches(family, n) for n in (device.model, *device.names))
        if not named or device.memory_gb != memory_gb:
            continue
        if bandwidth_tbs is None or device.bandwidth_tbs == bandwidth_tbs:
            return device
    return None
