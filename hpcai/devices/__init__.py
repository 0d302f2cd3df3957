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
def _by_name() -> dict[str, Device]:
    index: dict[str, Device] = {}
    for device in gpus():
        for name in (device.model, *device.names):
            other = index.setdefault(_key(name), device)
            if other is not device:
                raise ValueError(f"gpus.toml: the name {name!r} is claimed by {other.model} and {device.model}")
    return index


def lookup(name: str | None) -> Device | None:
    """The table's entry for a reported device name; exact, never a substring."""
    if not name:
        return None
    return _by_name().get(_key(name))
