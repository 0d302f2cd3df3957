"""Progress of a long command's steps, on a terminal only.

One line on stderr, rewritten in place: "selftest [3/6] caps, 41 s"; the seconds tick
while a step runs, so a check that takes minutes shows it is alive. When stderr is
not a terminal (a log file, a pipe, a batch job) nothing is written: logs, tables and
JSON stay exactly as they were.
"""
from __future__ import annotations

import sys
import threading
import time

CLEAR = "\r\x1b[K"  # carriage return, then erase to the end of the line (ECMA-48 EL)


def on_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """with Progress("selftest", 6) as progress: progress.step("library") ..."""

    def __init__(self, what: str, total: int | None = None, stream=None, tick_s: float = 1.0):
        self.what, self.total, self.tick_s = what, total, tick_s
        self.stream = stream if stream is not None else sys.stderr
        self.shown = on_terminal(self.stream)
        self.count, self.text, self.since = 0, "", time.monotonic()
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> Progress:
        if self.shown and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="hpcai-progress", daemon=True)
            self._ticker.start()
        return self

    def stop(self) -> None:
        """The ticker ended and the line erased: what the command prints next starts clean."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self.text:
            self._write(CLEAR)

    def __enter__(self) -> Progress:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def step(self, text: str) -> None:
        """The next step begins: its seconds count from now."""
        self.count, self.text, self.since = self.count + 1, text, time.monotonic()
        self._show()

    def update(self, text: str) -> None:
        """What the running step is doing now (its seconds go on counting)."""
        if text != self.text:
            self.text = text
            self._show()

    def _line(self) -> str:
        of = f" [{self.count}/{self.total}]" if self.total else ""
        return f"{self.what}{of} {self.text}, {time.monotonic() - self.since:.0f} s"

    def _show(self) -> None:
        if self.text:
            self._write(CLEAR + self._line())

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            self._show()

    def _write(self, text: str) -> None:
        if not self.shown:
            return
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
