"""Processes the tests start: with the default SIGHUP disposition whatever the
suite inherited (under `nohup` it is ignored, and the product rightly keeps an
ignored SIGHUP ignored), in their own session, and marked, so that teardown
can stop every one of them and their descendants however the test ended,
even ones that left their session (torchrun's ranks) or lost their parent."""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

MARK = "HPCAI_TEST_PROCESS_MARK"


def default_signals() -> None:
    """preexec_fn: SIGHUP (and SIGINT) back to their defaults in the child."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def new_mark() -> str:
    return uuid.uuid4().hex


def popen_options(env: dict, mark: str) -> dict:
    """Keyword arguments for subprocess.Popen/run: the mark in the environment
    (inherited by every descendant), default signals, a session of its own."""
    env = dict(env)
    env[MARK] = mark
    return {"env": env, "preexec_fn": default_signals, "start_new_session": True}


def marked_pids(mark: str) -> list[int]:
    """Processes of this user whose environment carries the mark."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or another user's
            continue
    return found


def kill_marked(mark: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL every marked process and its process group; wait until none is left.
    Returns the pids that were still running."""
    pids = marked_pids(mark)
    for pid in pids:
        for kill in (lambda p: os.killpg(os.getpgid(p), signal.SIGKILL),
                     lambda p: os.kill(p, signal.SIGKILL)):
            try:
                kill(pid)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_running(p) for p in marked_pids(mark)):
        time.sleep(0.05)
    return pids


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
