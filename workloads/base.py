"""The contract between the harness and a workload.

The harness owns timing, synchronisation and telemetry. A workload sets
itself up, then does steps, each returning the units of work this process
did (images, tokens).
"""
from __future__ import annotations

import abc


class StepWorkload(abc.ABC):
    unit: str = "images"

    @abc.abstractmethod
    def step(self) -> int:
        """One training step; returns units of work done by this process."""

    @abc.abstractmethod
    def latest_loss(self) -> float | None:
        """The last step's loss (may synchronise the device)."""

    @abc.abstractmethod
    def describe(self) -> dict:
        """The resolved configuration, recorded in the result."""

    def peak_memory(self) -> dict | None:
        """Peak memory this process used, with its kind."""
        return None
