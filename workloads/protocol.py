"""The seed paper's protocol: warm-up epochs discarded, measured epochs timed
between device synchronisations, telemetry marked at every epoch boundary.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from hpcai.workloads import distributed, heartbeat


@dataclass
class Epoch:
    index: int
    warmup: bool
    steps: int
    units: int
    start: float  # wall-clock seconds (time.time), comparable with samples
    end: float
    duration_s: float  # from perf_counter, between synchronisations
    loss: float | None
    # Data from storage (--data): seconds this rank waited for input, the rest of
    # the epoch it computed, and the bytes its loader read. None: preloaded inputs.
    data_wait_s: float | None = None
    compute_s: float | None = None
    data_bytes: int | None = None

    @property
    def throughput(self) -> float:
        return self.units / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict:
        doc = asdict(self)
        for key in ("data_wait_s", "compute_s", "data_bytes"):
            if doc[key] is None:
                del doc[key]
        return doc


@dataclass
class Progress:
    """What has completed so far; survives an exception in the loop."""

    epochs: list[Epoch] = field(default_factory=list)
    first_loss: float | None = None

    @property
    def measured(self) -> list[Epoch]:
        return [e for e in self.epochs if not e.warmup]


def synchronize(ctx, workload=None) -> None:
    """Wait for the device. A workload of another framework (TensorFlow)
    brings its own synchronize(); PyTorch is then never imported."""
    own = getattr(workload, "synchronize", None)
    if own is not None:
        own()
    elif ctx.device_type == "cuda":
        import torch

        torch.cuda.synchronize(ctx.device)


def run_epoch(workload, ctx, sampler, steps: int, warmup: bool, progress: Progress,
              on_epoch=None, total: int | None = None) -> Epoch:
    """One epoch of `steps` steps between synchronisations, telemetry marked at
    both ends, the data-wait counters read around it (--data). The one epoch
    loop: fixed runs (run_epochs), adaptive windows and in-run segments
    (workloads/inrun.py) all run their epochs here."""
    index = len(progress.epochs)
    counters = getattr(workload, "input_counters", None)
    distributed.barrier(ctx)
    synchronize(ctx, workload)
    first = last = None
    if sampler is not None:
        first = sampler.mark(f"epoch{index}.start")
    start_wall, start = time.time(), time.perf_counter()
    before = counters() if counters is not None else None
    units = 0
    for _ in range(steps):
        units += workload.step()
        heartbeat.beat()  # the launcher's stall watchdog sees each step
        if progress.first_loss is None:
            progress.first_loss = workload.latest_loss()  # one sync, in warm-up
    synchronize(ctx, workload)
    duration = time.perf_counter() - start
    end_wall = time.time()
    if sampler is not None:
        last = sampler.mark(f"epoch{index}.end")
    epoch = Epoch(index, warmup, steps, units, start_wall, end_wall, duration,
                  workload.latest_loss())
    after = counters() if before is not None else None
    if before is not None and after is not None:
        epoch.data_wait_s = after[0] - before[0]
        epoch.compute_s = max(0.0, duration - epoch.data_wait_s)
        epoch.data_bytes = after[1] - before[1]
    epoch.marks = (first, last)  # the counters read at both ends, for a block's energy
    progress.epochs.append(epoch)
    if on_epoch is not None:
        on_epoch(epoch, total if total is not None else index + 1)
    return epoch


def run_epochs(workload, protocol: dict, ctx, sampler=None, on_epoch=None,
               progress: Progress | None = None) -> Progress:
    """The fixed protocol: warm-up epochs, then measured epochs."""
    progress = progress if progress is not None else Progress()
    warmup = int(protocol["warmup_epochs"])
    total = warmup + int(protocol["epochs"])
    steps = int(protocol["steps_per_epoch"])
    for index in range(total):
        run_epoch(workload, ctx, sampler, steps, index < warmup, progress, on_epoch, total)
    return progress
