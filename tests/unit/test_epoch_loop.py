"""One epoch loop: the fixed protocol (protocol.run_epochs) and the adaptive and
in-run programs (inrun.Measurer) run their epochs through protocol.run_epoch,
so what one records (the data-wait counters of --data) the other does too."""
from hpcai.workloads import distributed, inrun, protocol
from hpcai.measure.adaptive import resolve_protocol
from hpcai.workloads.declaration import CPU_TINY_WINDOWS
from hpcai.workloads.protocol import Progress


class ReadsData:
    """A step-driven workload whose input pipeline counts wait and bytes."""

    def __init__(self):
        self.wait_s, self.bytes, self.steps = 0.0, 0, 0

    def synchronize(self):  # no framework
        pass

    def step(self) -> int:
        self.steps += 1
        self.wait_s += 0.25
        self.bytes += 1000
        return 4

    def latest_loss(self):
        return 1.0

    def input_counters(self):
        return self.wait_s, self.bytes


PROTOCOL = {"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 3, "sample_interval_s": 0.1}


def _data_of(progress: Progress) -> list[tuple[float, int]]:
    return [(e.data_wait_s, e.data_bytes) for e in progress.epochs]


def test_the_fixed_protocol_records_each_epochs_data_wait():
    progress = protocol.run_epochs(ReadsData(), PROTOCOL, distributed.single("cpu"))
    assert [e.warmup for e in progress.epochs] == [True, False, False]
    assert _data_of(progress) == [(0.75, 3000)] * 3


def test_in_run_epochs_record_the_data_wait_as_a_single_run_does():
    assert inrun.run_epoch is protocol.run_epoch  # one loop, not a copy
    progress, seen = Progress(), []
    segments = resolve_protocol(PROTOCOL, CPU_TINY_WINDOWS, in_run=True)  # as the launcher resolves it
    measurer = inrun.Measurer(ReadsData(), segments, distributed.single("cpu"), None, progress,
                              on_epoch=lambda epoch, total: seen.append((epoch.index, total)))

    def program():  # warm-up once, then the fixed window of a segment
        yield from measurer.warm_up()
        yield from measurer.measure()
    measurer.drive(program())
    assert [e.warmup for e in progress.epochs] == [True, False, False]
    assert _data_of(progress) == [(0.75, 3000)] * 3  # was (None, None): the counters skipped
    assert all(e.compute_s is not None for e in progress.epochs)
    assert seen == [(0, 1), (1, 2), (2, 3)] and progress.first_loss == 1.0


def test_the_epoch_lines_of_a_sweep_say_where_the_measurement_is():
    """In-run epochs have no fixed total (the callback's was the epoch's own number:
    "epoch 3/3"): the measurer's status gives the phase and its measured progress."""
    progress, seen = Progress(), []
    segments = resolve_protocol(PROTOCOL, CPU_TINY_WINDOWS, in_run=True)
    measurer = inrun.Measurer(ReadsData(), segments, distributed.single("cpu"), None, progress,
                              on_epoch=lambda epoch, total: seen.append(measurer.status()))

    def program():
        yield from measurer.warm_up()
        measurer.segment = 2
        yield from measurer.settle()  # no telemetry: one epoch, then it stops
        yield from measurer.measure()
    measurer.drive(program())
    assert seen[0] == "warm-up 1/1"
    limit = segments["settle_max_s"]
    assert seen[1].startswith("segment 2, settling ") and (
        seen[1].endswith(f" of at most {limit:g} s") or seen[1].endswith(f"past its {limit:g} s limit, ends with this epoch"))
    window = seen[2:]
    assert window and all(s.startswith("segment 2, ") for s in window)
    if segments.get("ci_target") is None:
        assert window == [f"segment 2, measured {i}/{len(window)}" for i in range(1, len(window) + 1)]
    else:
        assert all(s.startswith("segment 2, window ") for s in window), window
        elapsed = [float(s.split("window ")[1].split(" s")[0]) for s in window]
        assert elapsed == sorted(elapsed)  # measured progress: it only grows
