"""Measure windows of any Python program: `import hpcai.measure` (no framework).

    import hpcai.measure as measure

    with measure.window("solve"):        # a named, measured window
        for block in blocks:
            solve(block)
            measure.step(len(block))     # units of work done in it

Under `hpcai-launch exec --api` each closed window is appended, as one JSON
line, to the events file the launcher named (HPCAI_MEASURE_EVENTS): the run's
epochs are these windows, measured with the launcher's telemetry, caps and
result. Run alone, the first window starts a measuring process beside the
program (python -m hpcai.workloads.measure_alone: the same telemetry, node
power and result document, no caps) and the program's exit ends it; the result
is written under HPCAI_RESULTS (default ./results).

Framework-free and launcher-free (tests/unit/test_layering.py): the measuring
process is started by name, never imported.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from hpcai.safe_files import open_append, write_json

EVENTS_ENV = "HPCAI_MEASURE_EVENTS"
# Under an in-run sweep (exec --api --cap A,B): where each measured window asks
# for its cap and waits until it is set (workloads/window_segments.py).
GATE_ENV = "HPCAI_MEASURE_GATE"
GATE_TIMEOUT_S = 900.0  # the launcher answers within ANSWER_TIMEOUT_S (600 s) itself
RESULTS_ENV = "HPCAI_RESULTS"
READY_TIMEOUT_S = 120.0  # the measuring process imports, finds the GPUs, starts sampling
END_TIMEOUT_S = 120.0


class MeasureError(RuntimeError):
    """The API was used out of order (a step outside any window, windows nested)."""


class _Window:
    def __init__(self, name: str, warmup: bool, unit: str | None):
        self.name, self.warmup, self.unit = name, warmup, unit
        self.units = 0.0
        self.steps = 0
        self.loss: float | None = None
        self.start = self.end = 0.0


class _Reporter:
    """Where closed windows go: the launcher's events file, or our own measurer."""

    def __init__(self):
        self._lock = threading.Lock()
        self.events: Path | None = None
        self.alone: subprocess.Popen | None = None
        self.result_dir: Path | None = None
        self.current: _Window | None = None
        self.windows = 0
        self.measured = 0  # measured windows opened: each one a segment under a gate

    def ensure(self) -> None:
        if self.events is not None:
            return
        named = os.environ.get(EVENTS_ENV)
        if named:
            self.events = Path(named)
            return
        self._start_alone()

    def _start_alone(self) -> None:
        """The measuring process beside this one; its sampler runs before we return."""
        base = Path(os.environ.get(RESULTS_ENV) or "results").absolute()
        base.mkdir(parents=True, exist_ok=True)
        handshake = base / f".hpcai-measure-{os.getpid()}-{time.time_ns()}"
        self.events = handshake.with_suffix(".jsonl")
        ready = handshake.with_suffix(".ready")
        self.alone = subprocess.Popen(
            [sys.executable, "-m", "hpcai.workloads.measure_alone", "--pid", str(os.getpid()),
             "--events", str(self.events), "--ready", str(ready), "--output", str(base)],
            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready.exists():
            if self.alone.poll() is not None or time.monotonic() > deadline:
                raise MeasureError("hpcai.measure could not start its measuring process "
                                   f"(exit code {self.alone.poll()}): see its output above")
            time.sleep(0.05)
        self.result_dir = Path(ready.read_text().strip())
        ready.unlink(missing_ok=True)
        atexit.register(self.finish)

    def write(self, event: dict) -> None:
        line = json.dumps(event) + "\n"
        with self._lock:
            # One write per line with O_APPEND (never through a link): lines from
            # threads never interleave.
            with open_append(self.events, 0o644) as fh:
                fh.write(line.encode())

    def wait_for_cap(self) -> int | None:
        """Under an in-run sweep: ask for this measured window's segment and wait
        until its cap is set; its index, or None (every cap measured already: the
        window runs unmeasured). Outside one: None at once."""
        gate = os.environ.get(GATE_ENV)
        if not gate:
            return None
        k, self.measured = self.measured, self.measured + 1
        folder = Path(gate)
        request, reply = folder / f"open-{k}.json", folder / f"go-{k}.json"
        write_json(request, {"window": k, "pid": os.getpid(), "time": time.time()})
        deadline = time.monotonic() + GATE_TIMEOUT_S
        while True:
            try:
                answer = json.loads(reply.read_text())
                break
            except (FileNotFoundError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise MeasureError(f"hpcai-launch did not set the cap for window {k} in "
                                   f"{GATE_TIMEOUT_S:g} s ({folder})")
            time.sleep(0.02)
        if not answer.get("measure"):
            print(f"hpcai.measure: window {k + 1}: every cap of the sweep is measured; "
                  "this window runs unmeasured", file=sys.stderr, flush=True)
            return None
        return int(answer["segment"])

    def finish(self) -> Path | None:
        """Run alone: end the measurement and wait for the result; its folder."""
        if self.alone is None:
            return None
        alone, self.alone = self.alone, None
        self.write({"event": "end", "time": time.time()})
        try:
            alone.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            alone.terminate()
        return self.result_dir


_REPORTER = _Reporter()


@contextlib.contextmanager
def window(name: str = "window", warmup: bool = False, unit: str | None = None):
    """A measured window (warmup=True: measured, but left out of the figures);
    unit: what step() counts (samples, cells; default: units, or exec's --units).
    Windows do not nest: one at a time per program."""
    if _REPORTER.current is not None:
        raise MeasureError(f"window {name!r} opened inside window {_REPORTER.current.name!r}: "
                           "close the first one (windows do not nest)")
    _REPORTER.ensure()
    # In-run: the window's clock starts once its cap is in force.
    segment = None if warmup else _REPORTER.wait_for_cap()
    current = _REPORTER.current = _Window(str(name), bool(warmup), unit)
    current.start = time.time()
    aborted = False
    try:
        yield current
    except BaseException:
        aborted = True  # recorded, never a complete measurement (its segment fails)
        raise
    finally:
        current.end = time.time()
        _REPORTER.current = None
        _REPORTER.write({"event": "window", "name": current.name, "warmup": current.warmup,
                         "start": current.start, "end": current.end, "units": current.units,
                         "steps": current.steps, "loss": current.loss, "unit": current.unit,
                         **({"segment": segment} if segment is not None else {}),
                         **({"aborted": True} if aborted else {})})
        _REPORTER.windows += 1


def step(units: float = 1, loss: float | None = None) -> None:
    """Units of work done (a batch's samples, a sweep's cells) in the open window."""
    current = _REPORTER.current
    if current is None:
        raise MeasureError("hpcai.measure.step() outside a window: open one with "
                           "`with hpcai.measure.window(\"name\"):`")
    current.units += float(units)
    current.steps += 1
    if loss is not None:
        current.loss = float(loss)


def finish() -> Path | None:
    """Run alone: end the measurement now (else at exit); the result's folder."""
    return _REPORTER.finish()
