"""The contract every node power source keeps (RAPL, HPE Cray pm_counters,
IPMI, Redfish): its channels, its API in words, and read() -> Sample.

The concrete sources import this module and nothing above it; node_power.py
opens them by kind.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

SCOPES = ("node", "cpu_package", "dram", "accelerator", "module")
BOUNDARY = {"node": "node", "cpu_package": "CPU package", "dram": "DRAM",
            "accelerator": "accelerator (GPU module)", "module": "module"}
DEFAULT_MAX_POWER_W = 20000.0  # above this, per channel, a reading is absurd


class SourceError(Exception):
    """A source could not be read; the message is the reason (no secrets)."""


@dataclass
class Channel:
    name: str  # e.g. "package-0", "dram-0", "node", "accel0"
    scope: str


@dataclass
class Sample:
    t: float
    power_w: dict  # channel -> W or None
    energy_j: dict  # channel -> cumulative J (since the source started) or None


class PowerSource(ABC):
    """One GPU-independent power source. Constructors raise SourceError with
    the reason when the source is absent or unreadable; so may read()."""

    kind: str  # the site's name for it: "rapl", "pm_counters", "ipmi", "redfish"
    channels: list[Channel]
    max_power_w: float = DEFAULT_MAX_POWER_W

    @property
    @abstractmethod
    def api(self) -> str:
        """The interface that produced the figures, in words (for the result)."""

    @abstractmethod
    def read(self) -> Sample:
        """Power (W) and cumulative energy (J) per channel, at time.monotonic()."""

    def take_backwards(self) -> set[str]:
        """The channels whose energy counter ran backwards since the last call."""
        return set()

    def close(self) -> None:  # noqa: B027 (optional: most sources hold nothing)
        """Release what the source holds (a cache folder, a client)."""
