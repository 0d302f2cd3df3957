"""What the sampler can read on this node: GPUs through their vendor library,
else the CPU packages through Linux powercap (RAPL), else nothing (with why).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.gpu.base import GpuDevice, GpuLibrary
from hpcai.measure.rapl import POWERCAP_ROOT, RaplDomain, find_rapl_domains

__all__ = ["POWERCAP_ROOT", "Discovery", "RaplDomain", "discover", "find_rapl_domains"]


@dataclass
class Discovery:
    kind: str | None  # "gpu" | "rapl" | None
    library: GpuLibrary | None = None
    gpus: list[GpuDevice] = field(default_factory=list)
    rapl: list[RaplDomain] = field(default_factory=list)
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
