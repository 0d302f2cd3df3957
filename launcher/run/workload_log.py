"""The workload's output: all of it in the run's log file, the readable part
on the terminal.

The workload writes into the log file directly (not through a pipe to the
launcher, so it never dies of a broken pipe if the launcher does); a thread
follows the file and echoes each line to the launcher's stderr, except
Python tracebacks, logging's reports of its own write errors, and torchrun's
failure banner (a failing run with two ranks prints about 80 of those lines), and a rank's error line that another rank
already printed word for word (every rank of a run without the GPUs it was
planned on says so). They stay in the log, and the launcher says where.
"""
from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

FILE = "workload.log"
POLL_S = 0.1
READ_BYTES = 1 << 20  # read from the log at once
MAX_LINE_BYTES = 64 * 1024  # of one line echoed to the terminal
_TORCHRUN_LOG = re.compile(r"^[EWI]\d{4} [\d:.]+ \d+ .*torch/distributed/elastic/")
# torch.distributed prefixes a rank's error output with its rank ("[rank1]: Traceback ...").
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


# The line that ends a traceback: `RuntimeError: ...`, `pkg.mod.SomeError: ...`,
# or a bare `KeyboardInterrupt`. A rank's own "[hpcai] error: ..." line is not one.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(:|$)")
_RANK_ERROR = "[hpcai] error: "
# A line cut short (its writer met a full disk) still opens a traceback.
_TRACEBACK = "Traceback (most recent call last"
# logging's Handler.handleError (Lib/logging/__init__.py): a banner, a traceback,
# "Call stack:" and its frames, then "Message: ..." and "Arguments: ..." last.
_LOGGING_ERROR, _LOGGING_ERROR_END = "--- Logging error ---", ("Arguments: ", "Use the traceback above")
_HPCAI_LINE = "[hpcai] "


class TracebackFilter:
    """Line by line: True to show a line, False for one of a traceback or banner.

    Ranks share the log file, so their tracebacks interleave line by line: the
    filter counts the tracebacks still open (a header not yet closed by its
    exception line) and hides every frame line while any is open, instead of
    assuming one traceback at a time."""

    def __init__(self):
        self.open = 0  # tracebacks whose exception line has not come yet
        self.banner_rules = None  # None, or the ==== rules of torchrun's banner seen so far
        self.logging_error = False  # inside logging's "--- Logging error ---" report
        self.hidden = 0
        self.errors_shown: set[str] = set()  # the ranks' error lines, each shown once

    def show(self, line: str) -> bool:
        keep = self._show(_RANK_PREFIX.sub("", line.rstrip("\n"), count=1))
        if not keep:
            self.hidden += 1
        return keep

    def _show(self, line: str) -> bool:
        if self.banner_rules is not None:
            if line.startswith("=" * 20):
                self.banner_rules += 1
                if self.banner_rules >= 2:
                    self.banner_rules = None
            return False
        if self.logging_error and not line.startswith(_HPCAI_LINE):
            self.logging_error = not line.startswith(_LOGGING_ERROR_END)
            return False
        self.logging_error = False
        if line.startswith(_LOGGING_ERROR):
            self.logging_error = True
            return False
        if line.startswith(_TRACEBACK):
            self.open += 1
            return False
        if self.open:
            if not line or line[0].isspace() or line.startswith("^"):
                return False  # a frame, a source line, a caret
            if _EXCEPTION_LINE.match(line) and not line.startswith(_CHAINED):
                # One traceback ends; torchrun's goes on with its failure banner.
                self.open -= 1
                if "ChildFailedError" in line:
                    self.banner_rules = 0
                return False
        if _TORCHRUN_LOG.match(line) or line.startswith(_CHAINED):
            return False
        if line.startswith(_RANK_ERROR):
            if line in self.errors_shown:
                return False
            self.errors_shown.add(line)
        return True


class BoundedLines:
    """Bytes in, whole lines out (to echo, as text), each cut at MAX_LINE_BYTES: a
    300 MB line without a newline costs the launcher at most that, not 300 MB (the
    log file keeps every byte)."""

    def __init__(self, echo):
        self.echo, self.pending, self.cut = echo, b"", 0  # cut: bytes skipped of this line

    def feed(self, chunk: bytes) -> None:
        *lines, rest = chunk.split(b"\n")
        for raw in lines:
            self._line(raw)
            self.pending, self.cut = b"", 0
        self._add(rest)

    def _add(self, part: bytes) -> None:
        room = MAX_LINE_BYTES - len(self.pending)
        self.pending += part[:max(room, 0)]
        self.cut += max(len(part) - max(room, 0), 0)

    def _line(self, last: bytes) -> None:
        self._add(last)
        text = self.pending.decode("utf-8", "replace")
        self.echo(text + (f" [… {self.cut} more bytes of this line are in the log]" if self.cut else ""))

    def close(self) -> None:
        if self.pending or self.cut:
            self._line(b"")


class LogFollower:
    """Opens the log for the workload and echoes it, filtered, while it runs."""

    def __init__(self, run_dir: Path, out=None):
        self.path = Path(run_dir) / FILE
        self.out = out or sys.stderr
        self.filter = TracebackFilter()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def open_for_workload(self):
        """A file object for the child's stdout and stderr (the caller closes it)."""
        from hpcai.safe_files import open_append  # never append through a planted link

        return open_append(self.path)

    def start(self) -> LogFollower:
        self._thread = threading.Thread(target=self._follow, name="hpcai-log", daemon=True)
        self._thread.start()
        return self

    def _follow(self) -> None:
        try:
            with open(self.path, "rb") as log:
                lines = BoundedLines(self._echo)
                while True:
                    finished = self._done.is_set()  # read once more after the end
                    chunk = log.read(READ_BYTES)
                    if chunk:
                        lines.feed(chunk)
                    elif finished:
                        lines.close()
                        return
                    else:
                        self._done.wait(POLL_S)
        except OSError:
            return

    def _echo(self, line: str) -> None:
        if self.filter.show(line):
            try:
                print(line, file=self.out, flush=True)
            except (OSError, ValueError):
                pass

    def stop(self) -> None:
        """Echo what is left; then say where hidden lines are."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            if self.path.stat().st_size == 0:
                self.path.unlink()  # no empty files left behind
        except OSError:
            pass
        if self.filter.hidden:
            try:
                print(f"hpcai: {self.filter.hidden} line(s) of tracebacks and repeated errors kept in {self.path}",
                      file=self.out, flush=True)
            except (OSError, ValueError):
                pass
