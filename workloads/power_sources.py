"""What the sampler can read on this node: GPUs through their vendor library,
else the CPU packages through Linux powercap (RAPL), else nothing (with why).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.gpu.base import GpuDevice, GpuLibrary, GpuReading

POWERCAP_ROOT = Path("/sys/class/powercap")


@dataclass
class Discovery:
    kind: str | None  # "gpu" | "rapl" | None
    library: GpuLibrary | None = None
    gpus: list[GpuDevice] = field(default_factory=list)
    rapl: list["RaplDomain"] = field(default_factory=list)
    reason: str | None = None  # why no power can be measured
    vendor: str | None = None

    def restrict(self, devices: dict) -> None:
        """Keep only the run's GPUs (by UUID, else by index), in the run's order:
        the sampler neither pays for nor reports another job's GPUs."""
        if self.kind != "gpu":
            return
        uuids, indices = devices.get("gpu_uuids"), devices.get("gpu_indices")
        if uuids:
            by_uuid = {g.info().uuid: g for g in self.gpus}
            kept = [by_uuid[u] for u in uuids if u in by_uuid]
        elif indices:
            by_index = {g.info().index: g for g in self.gpus}
            kept = [by_index[i] for i in indices if i in by_index]
        else:
            return
        if not kept:
            self.reason = "none of the run's GPUs is visible to the GPU management library here"
        self.gpus = kept

    def close(self) -> None:
        if self.library is not None:
            self.library.close()
            self.library = None


class RaplDomain:
    """One CPU package's energy counter (µJ, wraps at max_energy_range_uj)."""

    def __init__(self, path: Path):
        self.path = path
        self.name = (path / "name").read_text().strip()
        self._max_uj = int((path / "max_energy_range_uj").read_text())
        self._last_uj: int | None = None
        self._total_j = 0.0
        self._last_t: float | None = None

    def read(self) -> GpuReading:
        """Cumulative energy, and power from the change since the last read."""
        uj = int((self.path / "energy_uj").read_text())
        t = time.monotonic()  # for the interval only: immune to clock steps
        power = None
        if self._last_uj is not None:
            delta = uj - self._last_uj
            if delta < 0:  # counter wrapped
                delta += self._max_uj
            self._total_j += delta / 1e6
            if t > self._last_t:
                power = delta / 1e6 / (t - self._last_t)
        self._last_uj, self._last_t = uj, t
        return GpuReading(power_w=power, power_source="rapl", energy_j=self._total_j)

    def energy_j(self) -> float:
        return self.read().energy_j


def find_rapl_domains(root: Path = POWERCAP_ROOT) -> tuple[list[RaplDomain], str | None]:
    """Package-level RAPL domains readable by this user, or why there are none."""
    if not root.is_dir():
        return [], f"{root} does not exist (no Linux powercap driver on this machine)"
    domains, unreadable = [], []
    for path in sorted(root.glob("intel-rapl:*")):
        if path.name.count(":") != 1:  # sub-domains (core, uncore) are inside packages
            continue
        try:
            domain = RaplDomain(path)
            domain.read()
            domains.append(domain)
        except PermissionError:
            unreadable.append(path.name)
        except (OSError, ValueError):
            continue
    if domains:
        return domains, None
    if unreadable:
        return [], f"RAPL counters {', '.join(unreadable)} are readable only by root"
    return [], f"no RAPL package domains under {root}"


def discover(vendor: str = "auto") -> Discovery:
    """GPUs first; CPU packages only when the node has no GPU library."""
    from hpcai.gpu import open_library

    library = open_library(vendor)
    if library is not None:
        devices = library.devices()
        if devices:
            return Discovery("gpu", library=library, gpus=devices, vendor=library.vendor)
        library.close()
    domains, why = find_rapl_domains()
    if domains:
        return Discovery("rapl", rapl=domains)
    return Discovery(
        None,
        reason=f"no GPU management library sees a GPU (nvidia-ml-py, amdsmi) and {why}",
    )
