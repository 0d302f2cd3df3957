"""The telemetry sampler: one thread reads every power source at a fixed
interval; the protocol marks epoch boundaries, where energy counters are read
directly so energy per window does not depend on the sampling grid.

Each tick reads only power and energy (``read_power``); everything else
(clocks, temperature, utilisation, limits, throttling) once a second, so the
sampler's cost stays small on an 8-GPU node. Time stamps come from the
monotonic clock, anchored to wall time once: an NTP step during a run moves
neither the intervals nor the integrated energy.
"""
from __future__ import annotations

import csv
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field

from hpcai.gpu.base import GpuReading
from hpcai.measure.stats import mean_of_known, quantile, summarize

SAMPLE_COLUMNS = [
    "t", "source", "power_w", "energy_j", "sm_clock_mhz", "memory_clock_mhz",
    "temperature_c", "utilization_pct", "memory_used_bytes", "power_limit_w",
    "throttle_reasons",
]


@dataclass
class Mark:
    label: str
    t: float
    energy_j: list  # per source, None where no counter


FULL_READ_S = 1.0  # everything beside power and energy, this often


@dataclass
class Sampler:
    sources: list  # objects with read() -> GpuReading and energy_j() (and read_power())
    interval_s: float = 0.1
    times: list = field(default_factory=list)  # one entry per tick
    readings: list = field(default_factory=list)  # per tick: list[GpuReading | None]
    marks: list = field(default_factory=list)
    read_cost_s: list = field(default_factory=list)  # wall time of each tick's reads
    errors: int = 0

    def __post_init__(self):
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start = self._cpu_end = None
        self._wall0, self._mono0 = time.time(), time.monotonic()
        self.full_every = max(1, round(FULL_READ_S / self.interval_s))
        self._ticks = 0
        # A mark (an epoch boundary) asks for a full read on the next tick, so a
        # window shorter than FULL_READ_S still holds clocks and temperature.
        self._full_next = False

    def now(self) -> float:
        """Wall-clock seconds, advanced by the monotonic clock since the start."""
        return self._wall0 + (time.monotonic() - self._mono0)

    # The thread keeps its own deadline grid so slow reads do not make it drift.
    def _loop(self) -> None:
        self._cpu_start = time.thread_time()
        deadline = time.monotonic()
        while not self._stop.is_set():
            self._tick()
            deadline += self.interval_s
            delay = deadline - time.monotonic()
            if delay < 0:  # overran: skip the missed slots instead of bursting
                deadline = time.monotonic()
                delay = 0
            self._stop.wait(delay)
        self._cpu_end = time.thread_time()

    def _tick(self) -> None:
        start = time.perf_counter()
        full = self._ticks % self.full_every == 0 or self._full_next
        self._full_next = False
        self._ticks += 1
        with self._lock:
            t = self.now()
            row = []
            for source in self.sources:
                read = source.read if full or not hasattr(source, "read_power") else source.read_power
                try:
                    row.append(read())
                except Exception:  # a failed read is a gap, not a failed run
                    self.errors += 1
                    row.append(None)
        self.times.append(t)
        self.readings.append(row)
        self.read_cost_s.append(time.perf_counter() - start)

    def start(self) -> None:
        if not self.sources or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="hpcai-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)

    def sample_for(self, seconds: float, label: str) -> tuple[Mark, Mark]:
        """Sample for `seconds` between two marks (`<label>-start`, `<label>-end`),
        stopped whatever happens; the marks."""
        self.start()
        try:
            start = self.mark(f"{label}-start")
            time.sleep(seconds)
            return start, self.mark(f"{label}-end")
        finally:
            self.stop()

    def mark(self, label: str) -> Mark:
        with self._lock:
            energies = []
            for source in self.sources:
                try:
                    energies.append(source.energy_j())
                except Exception:
                    energies.append(None)
            mark = Mark(label, self.now(), energies)
        self.marks.append(mark)
        self._full_next = True
        return mark

    # ---- what the result needs -------------------------------------------
    def achieved_intervals(self) -> dict | None:
        return summarize([b - a for a, b in zip(self.times, self.times[1:])])

    def overhead(self) -> dict | None:
        """The sampler's own cost: per tick, and its share of one CPU core."""
        if not self.read_cost_s or self._cpu_start is None or self._cpu_end is None:
            return None
        span = self.times[-1] - self.times[0] if len(self.times) > 1 else 0.0
        cpu = self._cpu_end - self._cpu_start
        return {
            "ticks": len(self.read_cost_s),
            "mean_tick_s": statistics.fmean(self.read_cost_s),
            "cpu_s": cpu,
            "cpu_share_of_core": cpu / span if span > 0 else None,
        }

    def series(self, index: int, t0: float, t1: float) -> list[tuple[float, GpuReading]]:
        return [
            (t, row[index])
            for t, row in zip(self.times, self.readings)
            if t0 <= t <= t1 and row[index] is not None
        ]

    def write_csv(self, path, source_names: list[str], t0: float | None = None,
                  t1: float | None = None) -> int:
        """Every tick, or those in [t0, t1] (an in-run segment's)."""
        from pathlib import Path

        from hpcai.safe_files import Folder

        rows = 0
        path = Path(path)
        # Never through a planted link: made new inside the run folder, renamed over the name.
        with Folder.open(path.parent) as folder, \
                folder.replacing_text(path.name, newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(SAMPLE_COLUMNS)
            for t, row in zip(list(self.times), list(self.readings)):
                if (t0 is not None and t < t0) or (t1 is not None and t > t1):
                    continue
                for name, reading in zip(source_names, row):
                    if reading is None:
                        continue
                    r = asdict(reading)
                    writer.writerow(
                        [f"{t:.4f}", name]
                        + [_fmt(r[c]) for c in SAMPLE_COLUMNS[2:-1]]
                        + ["|".join(r["throttle_reasons"] or [])]
                    )
                    rows += 1
        return rows


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def integrate_power_j(series: list[tuple[float, GpuReading]]) -> float | None:
    """Trapezoidal energy over the samples' span."""
    points = [(t, r.power_w) for t, r in series if r.power_w is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))



def window_stats(series: list[tuple[float, GpuReading]]) -> dict:
    """Power, clocks, temperature, utilisation and throttling over a window."""
    readings = [r for _, r in series]
    throttle: dict[str, float] = {}
    known = [r for r in readings if r.throttle_reasons is not None]  # read, and readable
    for r in known:
        for reason in r.throttle_reasons:
            throttle[reason] = throttle.get(reason, 0) + 1
    n = len(readings)
    source = next((r.power_source for r in readings if r.power_source), None)
    return {
        "samples": n,
        "power_w": summarize([r.power_w for r in readings]),
        "power_source": source,
        "power_w_1s_p95": _trailing_mean_p95(series) if source == "instant" else None,
        "sm_clock_mhz_mean": mean_of_known([r.sm_clock_mhz for r in readings]),
        "memory_clock_mhz_mean": mean_of_known([r.memory_clock_mhz for r in readings]),
        "temperature_c": summarize([r.temperature_c for r in readings]),
        "utilization_pct_mean": mean_of_known([r.utilization_pct for r in readings]),
        "power_limit_w": mean_of_known([r.power_limit_w for r in readings]),
        # Every reading's extremes: a limit changed and changed back mid-window shows.
        "power_limit_w_min": _extreme(min, [r.power_limit_w for r in readings]),
        "power_limit_w_max": _extreme(max, [r.power_limit_w for r in readings]),
        "throttle_reasons": {k: v / len(known) for k, v in sorted(throttle.items())} if known else {},
    }


# A GPU's power limit governs its power averaged over about 1 s; instant readings
# overshoot it by 10-25% on an H100 at 700 W (the GPU kit, 2026-11-28), so a bound on
# the limit reads the trailing 1 s mean (NVML docs, nvmlDeviceGetPowerUsage).
LIMIT_WINDOW_S = 1.0


def _trailing_mean_p95(series: list[tuple[float, GpuReading]]) -> float | None:
    """p95 of the trailing LIMIT_WINDOW_S mean of the power samples, once a full
    window has passed; None for a shorter window."""
    points = [(t, r.power_w) for t, r in series if r.power_w is not None]
    if not points or points[-1][0] - points[0][0] < LIMIT_WINDOW_S:
        return None
    means, start, total = [], 0, 0.0
    for end, (t, power) in enumerate(points):
        total += power
        while points[start][0] <= t - LIMIT_WINDOW_S:
            total -= points[start][1]
            start += 1
        if t - points[0][0] >= LIMIT_WINDOW_S:
            means.append(total / (end - start + 1))
    return quantile(means, 0.95)


def _extreme(pick, values):
    known = [v for v in values if v is not None]
    return pick(known) if known else None
