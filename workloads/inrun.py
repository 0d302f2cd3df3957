"""Settled, adaptive measurement windows for step-driven workloads, and the
segments of an in-run sweep.

A Measurer decides epochs of training steps as it goes: settle epochs
(recorded as warm-up) until power and temperature stop drifting, then measured
blocks until the confidence target is met (hpcai/measure/adaptive.py). Its phases
are generators that yield (steps, warmup) for the next epoch and receive the
Epoch back: `drive` runs them for a workload whose steps the harness calls
(device synchronised, telemetry marked at both ends, as the seed paper's
protocol); an engine with its own loop (LitGPT) feeds them from its step
clock instead. Rank 0 decides; every rank follows, so all run the same epochs.
"""
from __future__ import annotations

import math
import time

from hpcai.measure import adaptive
from hpcai.measure.stats import median
from hpcai.workloads import distributed
from hpcai.workloads.protocol import Epoch, run_epoch


def rank0(ctx, value):
    """Rank 0's value, on every rank (a collective: every rank calls it)."""
    return distributed.gather(ctx, value)[0] if ctx.distributed else value



def _settling(elapsed: float, limit: float) -> str:
    """The settle phase's progress; past its limit it ends with the epoch that is running
    (it is judged between epochs), which says why the seconds exceed the limit."""
    if elapsed <= limit:
        return f"settling {elapsed:.1f} s of at most {limit:g} s"
    return f"settling {elapsed:.1f} s: past its {limit:g} s limit, ends with this epoch"

class Measurer:
    """counted: indices of the sampler's sources whose energy counts (the run's GPUs)."""

    def __init__(self, workload, protocol: dict, ctx, sampler, progress, on_epoch=None,
                 counted: list[int] | None = None):
        self.workload, self.protocol, self.ctx = workload, protocol, ctx
        self.sampler, self.progress, self.on_epoch = sampler, progress, on_epoch
        self.counted = counted if counted is not None else (
            list(range(len(sampler.sources))) if sampler is not None else [])
        self.block_steps = int(protocol["steps_per_epoch"])
        # An engine's epochs are not marked by run_epoch: the program marks them.
        self.marks_epochs = bool(getattr(workload, "runs_programs", False))
        # Where the measurement is, for the epoch lines (status()): a sweep's epochs
        # have no fixed total, so "epoch 37/37" told nothing; the phase and its
        # measured progress do. segment: the in-run segment (1-based), None outside.
        self.phase: tuple | None = None
        self.segment: int | None = None

    def status(self) -> str | None:
        """The phase of the epoch just run and how far it has come, e.g.
        "segment 3, window 12.4 s, CI target from 30 s, limit 600 s"."""
        if self.phase is None:
            return None
        kind, *values = self.phase
        if kind in ("warm-up", "measured"):
            text = f"{kind} {values[0]}/{values[1]}"
        elif kind == "settle":
            text = _settling(time.time() - values[0], values[1])
        elif kind == "window":
            text = f"window {time.time() - values[0]:.1f} s, CI target from {values[1]:g} s, limit {values[2]:g} s"
        else:
            text = kind
        return f"segment {self.segment}, {text}" if self.segment is not None else text

    def _epoch(self, steps: int, warmup: bool):
        """Ask for one epoch; with an engine, read the counters at its ends here."""
        first = self.sampler.mark("epoch.start") if self.marks_epochs and self.sampler else None
        epoch = yield (steps, warmup)
        if first is not None:
            epoch.marks = (first, self.sampler.mark("epoch.end"))
        return epoch

    def drive(self, program) -> None:
        """Run a program's epochs with the harness's own loop (a StepWorkload)."""
        try:
            request = next(program)
            while True:
                steps, warmup = request
                epoch = run_epoch(self.workload, self.ctx, self.sampler, steps, warmup,
                                  self.progress, self.on_epoch)
                request = program.send(epoch)
        except StopIteration:
            return

    def warm_up(self, steps: int | None = None):
        """The protocol's warm-up epochs, once per process (of `steps` each, else
        the protocol's steps per epoch)."""
        count = int(self.protocol["warmup_epochs"])
        for index in range(count):
            self.phase = ("warm-up", index + 1, count)
            yield from self._epoch(int(steps or self.protocol["steps_per_epoch"]), True)

    def _calibrate(self, step_times: list[float]) -> None:
        """Steps per block so a block lasts at least block_s (one sensor update), at
        the median step time of the settle epochs so far. The first settle epoch
        alone (what this once used) is often a few slow steps just after the warm-up
        or a cap change: the blocks then came out at half of block_s or less, shorter
        than one update of the sensor they are meant to span (NVML's 1 s power
        average on a GPU), so block energies correlated and the half-widths were
        understated. In-run, each segment's first settle epoch is already a block."""
        step_s = median(step_times)
        block_s = max(float(self.protocol["block_s"]), float(self.protocol["sample_interval_s"]))
        steps = max(1, math.ceil(block_s / step_s)) if step_s > 0 else self.block_steps
        self.block_steps = int(rank0(self.ctx, steps))

    # ---- settle ------------------------------------------------------------
    def _series(self, t0: float) -> tuple[list, list]:
        """Node power (sum of the counted sources) and hottest temperature per tick since t0."""
        power, temperature = [], []
        if self.sampler is None:
            return power, temperature
        for t, row in zip(list(self.sampler.times), list(self.sampler.readings)):
            if t < t0:
                continue
            readings = [row[i] for i in self.counted if i < len(row)]
            watts = [r.power_w for r in readings if r is not None and r.power_w is not None]
            if readings and len(watts) == len(readings):
                power.append((t, sum(watts)))
            temps = [r.temperature_c for r in readings if r is not None and r.temperature_c is not None]
            if temps:
                temperature.append((t, max(temps)))
        return power, temperature

    def settle(self):
        """Epochs (recorded as warm-up) until power and temperature stop drifting."""
        p = self.protocol
        window_s, max_s = float(p["settle_window_s"]), float(p["settle_max_s"])
        start = time.time()
        epochs, found, why = 0, {"temperature_c": None, "power_frac": None}, None
        step_times: list[float] = []
        self.phase = ("settle", start, max_s)
        while why is None:
            epoch = yield from self._epoch(self.block_steps, True)
            epochs += 1
            step_times.append(epoch.duration_s / max(1, epoch.steps))
            self._calibrate(step_times)
            decision = None
            if self.ctx.rank == 0:
                elapsed = time.time() - start
                if self.sampler is None:
                    decision = ("no telemetry", {"temperature_c": None, "power_frac": None})
                elif elapsed >= window_s:
                    found = adaptive.drift(*self._series(start), window_s)
                    if adaptive.is_settled(found, p):
                        decision = ("settled", found)
                    elif elapsed >= max_s:
                        decision = ("max_settle", found)
            decision = rank0(self.ctx, decision)
            if decision is not None:
                why, found = decision
        return {"seconds": time.time() - start, "epochs": epochs, "stopped": why,
                "settled": why == "settled", "drift_at_start": found,
                "window_s": window_s, "max_s": max_s,
                "thresholds": {"temperature_c": float(p["settle_temperature_c"]),
                               "power_frac": float(p["settle_power_frac"])}}

    # ---- the measured window -------------------------------------------------
    def _energy(self, epoch: Epoch) -> float | None:
        """The block's energy: the counters read at its marks, else the samples."""
        from hpcai.workloads.result import source_energy

        if self.sampler is None or not self.counted:
            return None
        first, last = getattr(epoch, "marks", (None, None))
        values = []
        for i in self.counted:
            a = first.energy_j[i] if first is not None else None
            b = last.energy_j[i] if last is not None else None
            if a is not None and b is not None and b >= a:
                values.append(b - a)
            else:  # no counter (or one that ran backwards): integrated power
                values.append(source_energy(self.sampler, i, epoch.start, epoch.end)["value"])
        return sum(values) if all(v is not None for v in values) else None

    def one_wave(self):
        """Serving: the window is one load wave, the protocol's request count sent
        by the benchmark client (one epoch, not warm-up). One wave gives one
        throughput figure, so there is no confidence interval to stop on: the
        record says so instead of a half-width. The client starts between the
        settle phase and the window (the server idles meanwhile): that gap is
        recorded too."""
        requests = int(self.protocol["steps_per_epoch"])
        settled_at = time.time()
        self.phase = (f"one load wave of {requests} requests",)
        epoch = yield from self._epoch(requests, False)
        return {"mode": "load wave", "ci_target": None, "stopped": "one load wave",
                "blocks": 1, "requests": requests,
                "gap_after_settle_s": max(0.0, epoch.start - settled_at),
                "note": "one run of the benchmark client per segment: adaptive stopping "
                        "(--ci-target) needs repeated blocks and does not apply"}

    def measure(self):
        """Fixed epochs (no ci_target) or adaptive blocks; the record of how it stopped."""
        p = self.protocol
        target = p.get("ci_target")
        rule = adaptive.StopRule(target, float(p["min_window_s"]), int(p["min_window_samples"]),
                                 float(p["max_window_s"]))
        if target is None:
            for index in range(int(p["epochs"])):
                self.phase = ("measured", index + 1, int(p["epochs"]))
                yield from self._epoch(int(p["steps_per_epoch"]), False)
            return {"mode": "fixed", "ci_target": None, "stopped": "fixed"}
        blocks: list[adaptive.Block] = []
        opened = time.time()
        self.phase = ("window", opened, rule.min_s, rule.max_s)
        why = None
        while why is None:
            epoch = yield from self._epoch(self.block_steps, False)
            decision = None
            if self.ctx.rank == 0:
                blocks.append(adaptive.Block(epoch.units, epoch.duration_s, self._energy(epoch)))
                samples = (sum(1 for t in self.sampler.times if t >= opened)
                           if self.sampler is not None else rule.min_samples)
                decision = rule.decide(blocks, samples)
            why = rank0(self.ctx, decision)
        record = {"mode": "adaptive", "ci_target": target, "stopped": why,
                  "block_s": float(p["block_s"]), "steps_per_block": self.block_steps,
                  "min_window_s": rule.min_s, "min_window_samples": rule.min_samples,
                  "max_window_s": rule.max_s}
        if self.ctx.rank == 0:
            record["blocks"] = len(blocks)
            record["half_width"] = rule.half_widths(blocks)
        return rank0(self.ctx, record)
