"""The contract between the harness and a workload.

The harness owns timing, synchronisation and telemetry. A StepWorkload sets
itself up, then does steps, each returning the units of work this process
did (images, tokens). An EngineWorkload wraps an engine with its own loop
(LitGPT's pretraining, an SGLang server): it runs the protocol itself and
reports epochs with absolute wall-clock timestamps, which the harness lines
up with the power samples.
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

    def metrics(self) -> dict | None:
        """Workload-specific figures for the result (latencies, MFU, ...)."""
        return None


class EngineWorkload(abc.ABC):
    unit: str = "tokens"

    @abc.abstractmethod
    def run(self, protocol: dict, progress, on_epoch=None) -> None:
        """Run warm-up and measured intervals, appending one
        hpcai.workloads.protocol.Epoch per interval to progress.epochs
        (warmup=True for discarded ones; start/end from time.time()) and
        calling on_epoch(epoch, total) after each. Set progress.first_loss
        where the engine has a loss. Must stop its engine on every path."""

    @abc.abstractmethod
    def describe(self) -> dict: ...

    def latest_loss(self) -> float | None:
        return None

    def peak_memory(self) -> dict | None:
        return None

    def metrics(self) -> dict | None:
        return None
