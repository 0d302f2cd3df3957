"""The next batch on the device while this step runs, and the step's wait for it.

On a GPU the batch after this one is copied (non_blocking, from pinned host
memory) and prepared on a side stream while the compute stream runs this
step; the compute stream waits only on that copy's event. The wait is timed
on the GPU with CUDA events (from when the compute stream is free to take a
batch to when the batch is there), not with two torch.cuda.synchronize per
step: the host stays ahead of the GPU and queued work is never counted as
waiting. The events are read when they have fired, and all of them when the
protocol asks for the totals (counters()).

On a CPU there is nothing to overlap: the wait is the host's time for the
loader and the preparation of the batch.
"""
from __future__ import annotations

import time
from typing import Callable, Iterator


class CudaStreams:
    """The few torch.cuda calls the prefetcher makes, on one device."""

    def __init__(self, device):
        import torch

        self.torch, self.device = torch, device
        self.side = torch.cuda.Stream(device=device)
        # Whatever the compute stream made before (constants, weights) is there first.
        self.side.wait_stream(torch.cuda.current_stream(device))

    def event(self, stream=None):
        """A timing event recorded now on `stream` (default: the compute stream)."""
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(stream if stream is not None else self.torch.cuda.current_stream(self.device))
        return event

    def on_side(self):
        return self.torch.cuda.stream(self.side)

    def hand_over(self, ready, tensors) -> None:
        """The compute stream waits for the copy; the tensors' memory is kept
        until the compute stream is done with them (they were made on the side)."""
        compute = self.torch.cuda.current_stream(self.device)
        compute.wait_event(ready)
        for tensor in tensors:
            tensor.record_stream(compute)

    @staticmethod
    def fired(event) -> bool:
        return event.query()

    @staticmethod
    def seconds(start, end) -> float:
        end.synchronize()
        return start.elapsed_time(end) / 1000.0


class DevicePrefetcher:
    """Batches from `batches` (host side), prepared by `to_device` into
    (tensors, nbytes); one batch ahead on a side stream when `streams` is given."""

    def __init__(self, batches: Iterator, to_device: Callable, streams: CudaStreams | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.batches, self.to_device, self.streams, self.clock = batches, to_device, streams, clock
        self._ahead = None  # (tensors, nbytes, ready event): the batch loaded for the next step
        self._pending: list[tuple] = []  # (start, end) event pairs not yet read
        self._wait_s = 0.0
        self.loaded = 0

    def next(self):
        """The tensors of the next batch on the device and the bytes read for it."""
        if self.streams is None:
            start = self.clock()
            tensors, nbytes = self._load_host()
            self._wait_s += self.clock() - start
            return tensors, nbytes
        return self._next_overlapped()

    def _next_overlapped(self):
        streams = self.streams
        start = streams.event()  # fires when the compute stream has finished the step before
        if self._ahead is None:  # the first step: nothing was loaded ahead yet
            self._ahead = self._load_on_side()
        tensors, nbytes, ready = self._ahead
        self._ahead = self._load_on_side()  # the batch after, copied while this step runs
        streams.hand_over(ready, tensors)
        self._pending.append((start, streams.event()))
        self._read_fired()
        return tensors, nbytes

    def _load_host(self):
        tensors, nbytes = self.to_device(next(self.batches))
        self.loaded += 1
        return tensors, nbytes

    def _load_on_side(self):
        with self.streams.on_side():
            tensors, nbytes = self._load_host()
            ready = self.streams.event(self.streams.side)
        return tensors, nbytes, ready

    def _read_fired(self) -> None:
        """Add the waits whose events have fired; keep the rest for later."""
        while self._pending and self.streams.fired(self._pending[0][1]):
            start, end = self._pending.pop(0)
            self._wait_s += self.streams.seconds(start, end)

    def wait_s(self) -> float:
        """Seconds the steps waited for their batches so far (all events read)."""
        for start, end in self._pending:
            self._wait_s += self.streams.seconds(start, end)
        self._pending.clear()
        return self._wait_s
