"""Turn termination signals into exceptions, so `with` blocks clean up.

Slurm sends SIGTERM at the time limit (then SIGKILL after KillWait), a closed
terminal sends SIGHUP, Ctrl-C sends SIGINT. Python's default for the first
two kills the process without running `finally`/`__exit__`, which would leave
GPUs capped; these helpers make them raise instead.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Callable, Iterator

from hpcai.errors import Interrupted

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _in_main_thread() -> bool:
    # signal.signal only works there.
    return threading.current_thread() is threading.main_thread()


def _swap(handler, previous: dict) -> None:
    # Fills `previous` as it goes, so a signal arriving mid-swap still lets
    # the caller's `finally` put back whatever was already replaced.
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue  # respect nohup and background jobs that chose to ignore it
        previous[sig] = current
        signal.signal(sig, handler)


def _restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)


@contextlib.contextmanager
def install_signal_handlers(callback: Callable[[int], None] | None = None) -> Iterator[None]:
    """SIGTERM/SIGHUP raise Interrupted(signum); SIGINT raises KeyboardInterrupt.

    callback(signum) runs first (the launcher forwards the signal to its child).
    Outside the main thread this does nothing. Previous handlers come back on exit.
    """
    if not _in_main_thread():
        yield
        return

    def handler(signum, frame):
        if callback is not None:
            try:
                callback(signum)
            except Exception:  # a failing forwarder must not stop the cleanup
                log.exception("signal callback failed")
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signum)

    previous: dict = {}
    try:
        _swap(handler, previous)
        yield
    finally:
        _restore(previous)


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[int]]:
    """Record SIGINT/SIGTERM/SIGHUP instead of acting on them (for restoring limits).

    Yields the list of signals received; the caller decides what to do after.
    """
    received: list[int] = []
    if not _in_main_thread():
        yield received
        return
    previous: dict = {}
    try:
        _swap(lambda signum, frame: received.append(signum), previous)
        yield received
    finally:
        _restore(previous)
