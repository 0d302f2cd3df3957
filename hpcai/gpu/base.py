"""The vendor-neutral view of a GPU that telemetry and power caps share.

One module per vendor (nvidia.py through nvidia-ml-py, amd.py through amdsmi)
implements GpuLibrary and GpuDevice. Units are in every name: watts, joules,
MHz, bytes. Vendor units (mW, µW, µJ, mJ) are converted at the vendor module
and nowhere else.
"""
from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field

# A power limit "matches" a cap (or a default, or the limit asked for) within this
# many watts: NVML sets limits in mW and amdsmi in µW, so a limit that held reads
# back within a watt. The one tolerance for it: validity's enforced_limit check
# (hpcai/measure/validity.py THRESHOLDS["limit_match_w"]), the cap session's and
# the sudo helper's read-back, and the job receipts' "who set the cap". Here, beside
# the limits it compares, because the root helper must import little (not hpcai.measure).
LIMIT_MATCH_W = 1.0


@dataclass(frozen=True)
class GpuInfo:
    index: int  # management-library index (PCI bus order on NVIDIA)
    vendor: str  # "nvidia" | "amd"
    name: str
    uuid: str
    memory_total_bytes: int
    pci_bus_id: str | None = None
    # What the workload's CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES names it by:
    # the UUID on NVIDIA, ROCr's "GPU-<16 hex>" on AMD (None: use the index).
    visible_id: str | None = None
    mig_enabled: bool = False  # NVIDIA MIG: power and energy are the whole GPU's
    mig_uuids: tuple = ()  # the GPU's MIG devices ("MIG-...")
    # The board's serial number where the library gives it (NVML: parts with an
    # inforom; amdsmi: the ASIC serial); None where it cannot say.
    serial: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PowerLimits:
    current_w: float  # the limit set now (what a cap changes)
    default_w: float | None
    min_w: float | None
    max_w: float | None
    enforced_w: float | None = None  # the limit in force (may differ, e.g. set by another agent)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GpuReading:
    """One telemetry reading of one GPU; None where the device cannot say."""

    power_w: float | None = None
    power_source: str | None = None  # "instant" | "average" (1 s on newer NVIDIA parts)
    energy_j: float | None = None  # cumulative counter, arbitrary origin
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    power_limit_w: float | None = None
    # None: not read this tick, or the device cannot say (not "never throttled").
    throttle_reasons: list[str] | None = field(default_factory=list)
    # The energy counter ran backwards since the last reading (RAPL's counter, which
    # hpcai unwraps itself): energy_j skipped that step, so it must not be the figure.
    counter_backwards: bool = False


class GpuDevice(abc.ABC):
    """One GPU. Reads are cheap and safe from one sampler thread."""

    @abc.abstractmethod
    def info(self) -> GpuInfo: ...

    @abc.abstractmethod
    def read(self) -> GpuReading:
        """Everything the sampler records, in one call. Only power and energy
        are essential: another metric that fails is None."""

    def read_power(self) -> GpuReading:
        """Power and energy only: what the sampler reads on every tick."""
        return self.read()

    def power_fields(self) -> dict[str, float | None]:
        """Each power reading the device offers, in W: {"instant": .., "average": ..}
        (None where it has none). For `hpcai-launch selftest`."""
        reading = self.read_power()
        return {"instant": reading.power_w if reading.power_source == "instant" else None,
                "average": reading.power_w if reading.power_source == "average" else None}

    @abc.abstractmethod
    def energy_j(self) -> float | None:
        """Cumulative energy counter in joules, or None when the device has none."""

    @abc.abstractmethod
    def power_limits(self) -> PowerLimits: ...

    @abc.abstractmethod
    def set_power_limit_w(self, watts: float) -> None:
        """Set the power limit. Raises PowerPermissionError without privileges."""


class GpuLibrary(abc.ABC):
    """A vendor management library, initialised once per process."""

    vendor: str = ""
    # GPUs the library counts but this process may not use (another job's, lost):
    # [{"index": int, "reason": str}].
    inaccessible: list = []

    @abc.abstractmethod
    def devices(self) -> list[GpuDevice]: ...

    @abc.abstractmethod
    def versions(self) -> dict[str, str]:
        """Driver and library versions, e.g. {"driver": "550.54", "nvml": "12.550"}."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
