"""The device prefetcher (workloads/device_prefetch.py): batches in the loader's
order, one loaded ahead on the side stream on GPUs, and the wait it counts.

The loader is a fake slow one that moves a fake clock on (no sleeping, no wall
times). FakeStreams stands in for torch.cuda's streams and events at their
boundary: an event records the time it was recorded (torch.cuda.Event.record:
it fires when the stream reaches it; here the stream is idle, so at once),
elapsed_time is in milliseconds as torch.cuda.Event.elapsed_time returns.
"""
from contextlib import contextmanager

import pytest

from hpcai.workloads.device_prefetch import DevicePrefetcher


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def slow_loader(clock, seconds_per_batch, log):
    index = 0
    while True:
        clock.now += seconds_per_batch  # the workers keep the step waiting this long
        log.append(("loaded", index))
        yield index
        index += 1


class FakeEvent:
    def __init__(self, clock, stream):
        self.time, self.stream, self.has_fired = clock(), stream, False

    def elapsed_time(self, end):
        return (end.time - self.time) * 1000.0


class FakeStreams:
    side = "side"

    def __init__(self, clock, log):
        self.clock, self.log, self.current = clock, log, "compute"

    def event(self, stream=None):
        return FakeEvent(self.clock, stream or self.current)

    @contextmanager
    def on_side(self):
        self.current = "side"
        yield
        self.current = "compute"

    def hand_over(self, ready, tensors):
        assert ready.stream == "side" and self.current == "compute"
        self.log.append(("handed", tensors[0]))

    @staticmethod
    def fired(event):
        return event.has_fired

    @staticmethod
    def seconds(start, end):
        return start.elapsed_time(end) / 1000.0


def to_device(clock, streams, log):
    def prepare(index):
        clock.now += 0.25  # copy and normalise
        log.append(("prepared", index, streams.current if streams else "cpu"))
        return (index, -index), 100 + index
    return prepare


def test_on_a_cpu_each_step_waits_for_its_loader_and_preparation_in_order():
    clock, log = FakeClock(), []
    pre = DevicePrefetcher(slow_loader(clock, 1.0, log), to_device(clock, None, log), clock=clock)
    got = [pre.next() for _ in range(3)]
    assert got == [((0, 0), 100), ((1, -1), 101), ((2, -2), 102)]
    assert pre.wait_s() == pytest.approx(3 * 1.25)
    assert pre.loaded == 3  # nothing ahead on a CPU


def test_on_a_gpu_the_next_batch_is_prepared_on_the_side_stream_while_this_one_is_used():
    clock, log = FakeClock(), []
    streams = FakeStreams(clock, log)
    pre = DevicePrefetcher(slow_loader(clock, 1.0, log), to_device(clock, streams, log), streams, clock=clock)
    first = pre.next()
    assert first == ((0, 0), 100) and pre.loaded == 2  # batch 1 loaded ahead
    assert [e for e in log if e[0] == "prepared"] == [("prepared", 0, "side"), ("prepared", 1, "side")]
    assert log[-1] == ("handed", 0)  # the compute stream waits for batch 0's copy only
    second = pre.next()
    assert second == ((1, -1), 101) and pre.loaded == 3 and log[-1] == ("handed", 1)


def test_on_a_gpu_the_wait_comes_from_the_events_read_once_they_fired():
    clock, log = FakeClock(), []
    streams = FakeStreams(clock, log)
    pre = DevicePrefetcher(slow_loader(clock, 1.0, log), to_device(clock, streams, log), streams, clock=clock)
    pre.next()  # the first step loads two batches (this one and the next): 2 x 1.25 s
    assert pre._pending and pre._wait_s == 0.0  # events not fired: nothing read, no sync
    pre._pending[0][1].has_fired = True
    pre.next()  # reads the fired pair, keeps the new one
    assert pre._wait_s == pytest.approx(2.5) and len(pre._pending) == 1
    assert pre.wait_s() == pytest.approx(2.5 + 1.25) and not pre._pending
