"""What every self-test check shares: its row, and the node it looks at."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

STATUSES = ("ok", "warn", "FAIL", "skipped")


@dataclass
class Check:
    check: str  # the group --only selects: library, gpus, power, meter, caps, sampler, workloads
    item: str  # what was checked, e.g. "GPU 0 idle"
    status: str  # one of STATUSES
    value: str  # the measured value, in words with units
    detail: dict = field(default_factory=dict)  # the numbers, for the JSON

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Context:
    """The node as the checks see it."""

    site: dict
    library: object | None  # GpuLibrary
    vendor: str | None
    gpus: list  # (GpuDevice, GpuInfo, workload id) for this job's GPUs
    journal: Path
    backend: object | None = None  # PowerBackend
    rapl: list = field(default_factory=list)
    no_gpu_reasons: list = field(default_factory=list)
    load: bool = True
    durations: dict = field(default_factory=dict)  # seconds: idle_s, load_s, cap_s, period_s, sampler_s
