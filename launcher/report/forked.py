"""A call made in a forked child while this process goes on, its result back
through a pipe. The report is made in one (its hundreds of MB of objects go back
to the system at once when the child ends, not freed one by one), and its
figures (matplotlib, a few seconds at any size) are drawn in another on a second
core while the tables and data files are written.

The child starts with this process's memory (copy-on-write; nothing is pickled
going in), sends back the pickled return value or exception and what it printed,
and leaves with os._exit: no interpreter teardown, no buffers of the parent
flushed twice. It dies with the parent (PR_SET_PDEATHSIG), so a killed report
leaves nothing drawing behind it. Where fork is missing, or HPCAI_REPORT_FORK=0,
the call is made in this process when its result is asked for.

A Claim lets the parent and a child share out one piece of work: whichever asks
first does it (the report's figures' worker makes the cells' tables when it
is done early; the report makes them when the worker is still drawing).

An Inbox carries one value the other way, sent after the fork: the figures'
worker is forked before any result is read (a child forked later would share
the results' pages, and CPython's reference counts, written on every use, would
copy them into both processes) and receives what it draws when it is known. A
value is written to the pipe by a thread, so a sender never waits for a child
still busy with what it was sent before.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading

from hpcai.errors import HpcaiError

FORK_ENV = "HPCAI_REPORT_FORK"


class Inbox:
    """One value for a forked child, sent by the parent after the fork."""

    _UNSENT = object()

    def __init__(self):
        self._read, self._write = os.pipe()
        self._value = self._UNSENT
        self.digest: str | None = None  # in the child: the sha256 of the pickle received
        self._child = False  # set by the ForkedCall that forks a child reading it
        self._writer: threading.Thread | None = None

    def send(self, value) -> None:
        """Pickled now (what the child gets is the value as it is now), written by
        a thread: the child may be busy and the pipe holds 64 KiB."""
        self._value = value
        if self._child and self._write is not None:  # else no reader: a full pipe would block
            data, fd, self._write = pickle.dumps(value), self._write, None
            self._writer = threading.Thread(target=_write_all, args=(fd, data), daemon=True)
            self._writer.start()

    def receive(self):
        """The value sent (in the child: waits for it)."""
        if self._value is self._UNSENT and self._read is not None:
            import hashlib

            with os.fdopen(self._read, "rb") as pipe:
                self._read = None
                data = pipe.read()
            self.digest = hashlib.sha256(data).hexdigest()  # what it was made from (kept_plots)
            self._value = pickle.loads(data)
        if self._value is self._UNSENT:
            raise RuntimeError("the value was never sent")
        return self._value

    def close(self) -> None:
        """After the child ended (or was stopped: the writer then fails at once)."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        self._close_end("_read")
        self._close_end("_write")

    def _close_end(self, end: str) -> None:
        fd = getattr(self, end)
        if fd is not None:
            os.close(fd)
            setattr(self, end, None)


class Claim:
    """One piece of work that a process or its forked child may do, done by the
    first to ask: one byte in a pipe made before the fork, which only one read gets."""

    def __init__(self):
        self._read, write = os.pipe()
        os.write(write, b"\0")
        os.close(write)  # no writer: a read after the byte's gets the end, b"", at once

    def take(self) -> bool:
        """True for the first caller in either process, False for every other."""
        return self._read is not None and os.read(self._read, 1) == b"\0"

    def close(self) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None


def _write_all(fd: int, data: bytes) -> None:
    try:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(data)
    except BrokenPipeError:
        pass  # the child is gone: its result says why


class ForkedCall:
    """fn(*args) in a child; result() waits for it and returns or raises what it did.
    inbox: an Inbox the child receives from, or a tuple of them (the parent keeps
    their sending ends).
    capture: what the call prints (sys.stdout, sys.stderr) is kept and printed by
    the parent with its result, so it reaches whatever the parent's streams are.
    retry: a child that dies without an answer (killed, crashed) has the call made
    again here; else WorkerDied says how it ended (a report killed for memory would
    only be killed again)."""

    def __init__(self, fn, *args, inbox: Inbox | tuple[Inbox, ...] | None = None,
                 capture: bool = False, retry: bool = True):
        self._inboxes = inbox if isinstance(inbox, tuple) else () if inbox is None else (inbox,)
        self._fn, self._args, self._capture = fn, args, capture
        self._retry = retry
        self._pid = self._read = None
        if hasattr(os, "fork") and os.environ.get(FORK_ENV, "1") != "0":
            self._start()

    def _start(self) -> None:
        read, write = os.pipe()
        parent = os.getpid()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            status = 0
            try:
                os.close(read)
                for inbox in self._inboxes:
                    inbox._close_end("_write")  # else the child's own copy holds it open
                _die_with(parent)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(_outcome(self._fn, self._args, self._capture))
            except BaseException:  # noqa: BLE001 - nothing may unwind into the parent's code
                status = 1
            finally:
                os._exit(status)
        os.close(write)
        for inbox in self._inboxes:
            inbox._close_end("_read")
            inbox._child = True
        self._pid, self._read = pid, read

    def result(self):
        if self._pid is None:
            return self._fn(*self._args)
        with os.fdopen(self._read, "rb") as pipe:
            data = pipe.read()
        self._read = None
        _, status = os.waitpid(self._pid, 0)
        self._pid = None
        try:
            kind, value, printed, warned = pickle.loads(data)
        except Exception:  # noqa: BLE001 - killed or broken child
            if self._retry:
                return self._fn(*self._args)
            raise WorkerDied(_ending(status)) from None
        sys.stdout.write(printed)
        sys.stderr.write(warned)
        if kind == "raised":
            raise value
        return value

    def close(self) -> None:
        """Stop a child whose result is no longer wanted (the report failed first)."""
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self._pid, 0)
            self._pid = None


class WorkerDied(HpcaiError):
    """A forked worker ended without an answer."""

    exit_code = 3

    def __init__(self, how: str):
        super().__init__(f"the report's worker process {how} before it finished",
                         "if it was killed for memory, report on fewer results at once or "
                         "on a machine with more memory; HPCAI_REPORT_FORK=0 makes the "
                         "report in one process")


def _ending(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"was killed by {name}" + (" (out of memory?)" if number == signal.SIGKILL else "")
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _outcome(fn, args, capture: bool) -> bytes:
    import io

    if capture:
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()

    def printed() -> tuple[str, str]:
        return ((sys.stdout.getvalue(), sys.stderr.getvalue()) if capture else ("", ""))

    try:
        return pickle.dumps(("returned", fn(*args), *printed()))
    except BaseException as exc:  # noqa: BLE001 - raised again in the parent
        try:
            data = pickle.dumps(("raised", exc, *printed()))
            pickle.loads(data)  # an exception whose __init__ takes other arguments fails here
            return data
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled
            return pickle.dumps(("raised", RuntimeError(f"{type(exc).__name__}: {exc}"),
                                 *printed()))


def _die_with(parent: int) -> None:
    """SIGKILL this child when the parent ends (Linux); other systems: best effort."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (prctl(2))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before prctl took effect
        os._exit(1)
