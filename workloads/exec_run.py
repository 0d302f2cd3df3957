"""The user's command as a workload (`hpcai-launch exec`, workloads/registry/exec.py).

The entrypoint (workloads/entrypoint.py) owns telemetry and the result; this
engine starts the command in its own process group (stopped as a group on
every path, SIGTERM when the entrypoint dies), copies its output into the
run's log, time-stamping each line as it arrives, and turns what it saw into
epochs: the whole command (time to solution), the intervals between lines
matching --progress-regex, or the windows the program reported through
hpcai.measure (its events file, named by HPCAI_MEASURE_EVENTS).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from hpcai.errors import WorkloadError
from hpcai.workloads import exec_progress, window_segments
from hpcai.workloads.base import EngineWorkload
from hpcai.workloads.engine_process import LINE_PIECE, GroupProcess
from hpcai.workloads.protocol import Epoch
from hpcai.workloads.registry.exec import SOLUTIONS, ExecParams

EVENTS_ENV = "HPCAI_MEASURE_EVENTS"  # hpcai/measure/api.py reports here under exec
GATE_ENV = "HPCAI_MEASURE_GATE"  # in-run: where the program asks for each window's cap
RUN_DIR_ENV = "HPCAI_RUN_DIR"  # the run's folder, for a command's scratch files
EVENTS_FILE = "measure-events.jsonl"
STOP_GRACE_S = 20.0  # the launcher allows its workload 30 s after a forwarded signal
API_UNITS = "units"  # what hpcai.measure.step() counts unless the run or the program names it


def resolve_command(command) -> list[str]:
    """The spec's argv; "{python}" (presets) is the entrypoint's own interpreter."""
    return [sys.executable if word == "{python}" else str(word) for word in command]


def count_mode(params: ExecParams) -> str:
    if params.progress_regex:
        return "regex"
    return "api" if params.api else "solution"


class _Command(GroupProcess):
    """GroupProcess with the output copied to our stdout (the run's workload.log)
    and each line handed over with the time it arrived."""

    def __init__(self, command, log_path, env, on_line):
        super().__init__("command", command, log_path, env, stop_grace_s=STOP_GRACE_S)
        self.on_line = on_line

    def start_in(self, cwd: str | None) -> None:
        import subprocess
        import threading

        from hpcai.workloads.engine_process import _PDEATHSIG_SHIM

        wrapped = [sys.executable, "-c", _PDEATHSIG_SHIM, str(os.getpid()), *self.command]
        self.proc = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env, cwd=cwd,
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._copy, name="command-output", daemon=True)
        self._reader.start()

    def _copy(self) -> None:
        out = sys.stdout.buffer
        for raw in iter(lambda: self.proc.stdout.readline(LINE_PIECE), b""):  # bounded: a line without end
            now = time.time()
            try:
                out.write(raw)
                out.flush()
            except (OSError, ValueError):
                pass  # a full disk under the log must not stop the counting
            self.on_line(raw.decode("utf-8", "replace"), now)


class ExecWorkload(EngineWorkload):
    runs_programs = False  # one fixed window: the command decides how long it runs

    def __init__(self, spec: dict, ctx):
        self.params = ExecParams.from_spec(spec)
        self.command = resolve_command(self.params.command)
        self.mode = count_mode(self.params)
        self.run_unit = self.unit = self.params.units or (
            API_UNITS if self.mode == "api" else SOLUTIONS)
        self.pattern = (exec_progress.compile_regex(self.params.progress_regex)
                        if self.mode == "regex" else None)
        self.run_dir = Path(spec["output_dir"])
        self.events = self.run_dir / EVENTS_FILE
        self.readings: list[exec_progress.Reading] = []
        self.lines_seen = 0
        self.exit_code: int | None = None
        self.seconds: float | None = None
        self.windows: dict | None = None
        self.event_lines: list[str] = []  # in-run: the closed windows' events, one per epoch

    # ---- the engine ---------------------------------------------------------
    def run(self, protocol: dict, progress, on_epoch=None, program=None) -> None:
        if self.params.attach_pid is not None:
            return self._attached(progress, on_epoch)
        if not self.command:
            raise WorkloadError("no command to run", "give one after `--`: hpcai-launch exec -- CMD")
        if program is not None and self.mode != "api":
            raise WorkloadError("exec measures in-run only with --api",
                                "add --api, or run the sweep with --no-in-run")
        env = dict(os.environ)
        env[RUN_DIR_ENV] = str(self.run_dir)
        if self.mode == "api":
            self.events.unlink(missing_ok=True)
            env[EVENTS_ENV] = str(self.events)
        gate_dir = self.run_dir / window_segments.GATE_DIR
        if program is not None:  # an in-run sweep: each measured window a segment
            window_segments.make_folder(gate_dir)
            env[GATE_ENV] = str(gate_dir)
        proc = _Command(self.command, self.run_dir / "command.log", env, self._line)
        started, t0 = time.time(), time.perf_counter()
        try:
            proc.start_in(self.params.cwd)
            if program is None:
                self.exit_code = proc.wait()
            else:
                self.exit_code = self._serve_gate(proc, program, gate_dir, progress, on_epoch)
        finally:
            proc.stop()  # the group, whatever is left of it (children it left behind)
        self.seconds = time.perf_counter() - t0
        ended = time.time()
        if program is not None:
            return self._end_gated(program)
        epochs = self._epochs(started, ended, protocol)
        total = len(epochs)
        for epoch in epochs:
            progress.epochs.append(epoch)
            if on_epoch is not None:
                on_epoch(epoch, total)
        if self.exit_code != 0:
            raise WorkloadError(f"the command exited with code {self.exit_code} after "
                                f"{self.seconds:.1f} s: a failed command is a failed run",
                                f"see its output in {self.run_dir / 'workload.log'}")
        if not any(not e.warmup for e in epochs):
            raise WorkloadError(self._nothing_measured(), self._nothing_measured_fix())

    # ---- in-run: the program's windows are the segments (workloads/window_segments.py) ----
    def _serve_gate(self, proc: _Command, gate, gate_dir: Path, progress, on_epoch) -> int:
        """Answer the program's window requests (each opens a segment at the next
        cap) and file its closed windows as they come, until it exits."""
        offset, window = 0, 0

        def drain() -> None:
            nonlocal offset
            lines, offset = window_segments.read_new_lines(self.events, offset)
            for line in lines:
                event = window_segments.window_event(line)
                if event is None:
                    continue
                self.event_lines.append(line)
                if event.get("unit"):  # the segments' results are written as we go
                    self._program_unit([line])
                segment = event.get("segment")
                # A measured window after the sweep's last cap belongs to no segment.
                epoch = exec_progress.epoch_from_event(
                    event, len(progress.epochs), True if segment is None else None)
                progress.epochs.append(epoch)
                if on_epoch is not None:
                    on_epoch(epoch, len(progress.epochs))
                if segment is not None:
                    gate.close(int(segment), aborted=bool(event.get("aborted")))

        while True:
            code = proc.poll()
            drain()
            if window_segments.requested(gate_dir, window):
                drain()  # the window before it closed first: its segment is filed
                window_segments.answer(gate_dir, window, gate.open())
                window += 1
                continue
            if code is not None:
                break
            time.sleep(window_segments.POLL_S)
        code = proc.wait()
        drain()
        return code

    def _end_gated(self, gate) -> None:
        _, self.windows = exec_progress.epochs_from_events(self.event_lines)
        self._program_unit(self.event_lines)
        if self.exit_code != 0:
            raise WorkloadError(f"the command exited with code {self.exit_code} after "
                                f"{self.seconds:.1f} s: a failed command is a failed run",
                                f"see its output in {self.run_dir / 'workload.log'}")
        gate.finish()

    def _attached(self, progress, on_epoch) -> None:
        """hpcai.measure run alone: the program is already running (its pid); say
        we sample (the ready file holds the run folder), then wait for its end event."""
        from hpcai.workloads import measure_alone

        self.events = Path(self.params.events)
        measure_alone.say_ready(self.run_dir)
        ended = measure_alone.wait_for_end(self.params.attach_pid, self.events)
        epochs = self._events_epochs()
        self.exit_code = 0 if ended else None
        try:  # the handshake's events file, kept with the run it made
            os.replace(self.events, self.run_dir / EVENTS_FILE)
        except OSError:
            pass
        for epoch in epochs:
            progress.epochs.append(epoch)
            if on_epoch is not None:
                on_epoch(epoch, len(epochs))
        if not ended:
            raise WorkloadError(f"the program (pid {self.params.attach_pid}) ended without "
                                "ending its measurement (killed, or os._exit)",
                                "its windows so far are in the result; let it exit normally or "
                                "call hpcai.measure.finish()")
        if not any(not e.warmup for e in epochs):
            raise WorkloadError(self._nothing_measured(), self._nothing_measured_fix())

    def _events_epochs(self) -> list[Epoch]:
        """The epochs (and windows) the program's API calls wrote to the events file."""
        try:
            lines = self.events.read_text().splitlines()
        except OSError:
            lines = []
        epochs, self.windows = exec_progress.epochs_from_events(lines)
        self._program_unit(lines)
        return epochs

    def _program_unit(self, lines: list[str]) -> None:
        named = exec_progress.unit_from_events(lines)
        if named and not self.params.units and _unit_name_ok(named):
            self.run_unit = self.unit = named

    def _line(self, line: str, at: float) -> None:
        self.lines_seen += 1
        if self.pattern is not None:
            reading = exec_progress.read_line(self.pattern, line, at)
            if reading is not None:
                self.readings.append(reading)

    def _epochs(self, started: float, ended: float, protocol: dict) -> list[Epoch]:
        if self.mode == "regex":
            return exec_progress.epochs_from_readings(self.readings, started,
                                                      int(protocol.get("warmup_epochs") or 0))
        if self.mode == "api":
            return self._events_epochs()
        return [Epoch(0, False, 1, 1, started, ended, ended - started, None)]

    def _nothing_measured(self) -> str:
        if self.mode == "regex":
            return (f"{len(self.readings)} of the command's {self.lines_seen} output lines matched "
                    f"--progress-regex {self.params.progress_regex!r}: no measured interval "
                    "(the first one, from the start, is warm-up)")
        return "the program reported no measured window through hpcai.measure"

    def _nothing_measured_fix(self) -> str:
        if self.mode == "regex":
            return "check the regex against the output in workload.log; it needs two matching lines or more"
        return ("open one with `with hpcai.measure.window(\"solve\"): ...` and report units with "
                "hpcai.measure.step(n), or drop --api")

    # ---- the result ---------------------------------------------------------
    def describe(self) -> dict:
        return {"task": "command", "command": self.command, "cwd": self.params.cwd, "count": self.mode,
                "unit": self.unit, "progress_regex": self.params.progress_regex}

    def metrics(self) -> dict | None:
        return {"exec": {"exit_code": self.exit_code, "seconds": self.seconds,
                         "count": self.mode, "matched_lines": len(self.readings)
                         if self.mode == "regex" else None, "windows": self.windows}}

    def segment_metrics(self, first_epoch: int) -> dict:
        """An in-run segment's figures: its own windows (one event line per epoch)."""
        _, windows = exec_progress.epochs_from_events(self.event_lines[first_epoch:])
        return {"exec": {"exit_code": self.exit_code, "seconds": self.seconds,
                         "count": self.mode, "matched_lines": None, "windows": windows}}

    def finish_document(self, doc: dict) -> None:
        """Time to solution, energy to solution and their product (EDP), from the
        document's measured window and energy (energy per unit: one solution)."""
        if self.mode != "solution":
            return
        metrics = (doc.get("workload_metrics") or {}).get("exec")
        if metrics is None:
            return
        seconds = (doc.get("work") or {}).get("measured_seconds")
        energy = (doc.get("power") or {}).get("energy_per_unit_j")
        metrics["time_to_solution_s"] = seconds or None
        metrics["energy_to_solution_j"] = energy
        metrics["edp_js"] = energy * seconds if energy is not None and seconds else None


def _unit_name_ok(name: str) -> bool:
    """A word (the result schema's pattern for a unit): tokens, cells, samples."""
    import re

    return re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", name) is not None


def build(spec: dict, ctx) -> ExecWorkload:
    return ExecWorkload(spec, ctx)
