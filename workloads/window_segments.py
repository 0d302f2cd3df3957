"""In-run sweeps of a program that marks its own windows (`hpcai-launch exec
--api`, Impl.in_run == "windows"): each measured window is one segment.

Three processes, two channels. The program (hpcai/measure/api.py), when it
opens a measured window, writes `gate/open-K.json` in the run folder and waits
for `gate/go-K.json`. The exec engine (workloads/exec_run.py) sees the request
and calls Gate.open(): that asks the launcher for segment K over the same
control channel the built-in workloads use (workloads/control.py; the launcher
files segment K-1's result, sets K's cap and reads it back, launcher/sweep/inrun.py),
opens the segment in the entrypoint, and the engine answers the program. The
window's close event closes the segment (its segment.json, for the launcher
to check). So the cap is in force before the window's clock starts, and each
window's result carries the cap it ran under.

No settle phase: the window opens as soon as the cap is read back, because
the program, not hpcai, decides how long it lasts (a warm-up window of its own
before each measured one is the program's way to settle).
"""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import WorkloadError
from hpcai.result_document import write_json_atomic

POLL_S = 0.05
GATE_DIR = "gate"  # in the run folder; the program's env names it (api.GATE_ENV)
# The record of how the window was chosen: the program's own, one per segment.
PROGRAM_WINDOW = {"mode": "fixed", "ci_target": None, "stopped": "fixed",
                  "note": "the program's own window (hpcai.measure.window): one per segment"}


def open_path(folder: Path, k: int) -> Path:
    return Path(folder) / f"open-{k}.json"


def go_path(folder: Path, k: int) -> Path:
    return Path(folder) / f"go-{k}.json"


class Gate:
    """The entrypoint's side of the program's windows: segment K opened when the
    program opens its K-th measured window, closed when that window closes."""

    def __init__(self, run, channel, segments: int):
        self.run, self.channel, self.segments = run, channel, segments
        self.next = 0  # the next segment to ask the launcher for
        self.done = False  # the launcher said the sweep has no cap left

    def open(self) -> dict:
        """The launcher's answer for the program's next measured window: the cap
        set ({"measure": True, "segment", "cap_w"}), or {"measure": False} once
        every cap is measured (the window then runs unmeasured)."""
        if self.run.segment is not None:  # the previous window ended by an exception
            self.run._close_segment(None, "failed", {
                "type": "WorkloadError",
                "message": "the program's window ended with an exception (see workload.log)"})
        if self.done:
            return {"measure": False, "segment": None}
        k = self.next
        answer = self.channel.ask(k)
        if answer.get("error"):
            raise WorkloadError(f"the launcher could not start segment {k}: {answer['error']}",
                                "see the launcher's output")
        if answer.get("done"):
            self.done = True
            return {"measure": False, "segment": None}
        run = self.run
        spec = copy.deepcopy(run.spec)
        spec.pop("inrun", None)
        spec.update(answer["spec"])
        run.measurer.segment = k + 1  # the epoch lines say which segment
        run.segment = {"index": k, "spec": spec, "first_epoch": len(run.progress.epochs),
                       "started": now_iso(), "t0": time.time(), "answer": answer}
        self.next = k + 1
        return {"measure": True, "segment": k, "cap_w": answer["cap_w"],
                "enforced_w": answer.get("enforced_w")}

    def close(self, segment: int, aborted: bool = False) -> None:
        """The program closed the window of `segment`: that segment's result. A
        window an exception ended stays open: it fails when the run or the next
        window ends it."""
        if aborted or self.run.segment is None or self.run.segment["index"] != segment:
            return
        self.run._close_segment({"window": dict(PROGRAM_WINDOW)}, "complete", None)

    def finish(self) -> None:
        """The program ended: fewer measured windows than caps is a failed sweep
        (the caps not measured stay missing, a later run measures them)."""
        if self.next < self.segments and not self.done:
            raise WorkloadError(
                f"the program measured {self.next} window(s) and the sweep has "
                f"{self.segments} cap(s) to measure: caps left unmeasured",
                "open one measured hpcai.measure.window() per cap, then run the same "
                "command again (the caps measured are kept)")


# ---- the program's requests (the engine polls them) ---------------------------------
def requested(folder: Path, window: int) -> bool:
    return open_path(folder, window).exists()


def answer(folder: Path, window: int, reply: dict) -> None:
    write_json_atomic(go_path(folder, window), reply)


def make_folder(folder: Path) -> None:
    """A fresh gate folder of our own (the program's env names it)."""
    folder.mkdir(mode=0o755, exist_ok=False)


def read_new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines appended to `path` since `offset`, and the new offset (a
    line still being written is left for the next read)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    return data[:end + 1].decode("utf-8", "replace").splitlines(), offset + end + 1


def window_event(line: str) -> dict | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and event.get("event") == "window" else None

