"""Hung and orphaned ranks: the stall watchdog, and every rank of a run ended
before its limits come back.

A rank that hangs (stopped, deadlocked in a collective) used to hold the caps
for as long as it hung; and on SIGTERM the launcher restored the limits while
ranks in their own sessions (torchrun starts each in one) still ran.

Progress comes from the workload's steps: each rank touches the run folder's
progress file (hpcai/workloads/heartbeat.py) as steps complete. No touch for
the protocol's `stall_timeout_s` (--stall-timeout-s; a default per preset
kind, recorded in the spec) ends the run `failed`. The clock starts when the
workload starts, so the default also covers start-up (imports, model build,
compile) before the first step.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from hpcai.launcher.run.options import log
from hpcai.workloads.heartbeat import PROGRESS_ENV

PROGRESS_FILE = ".progress"
# By preset kind (workloads/declaration.py PRESET_KINDS): test presets start and
# step in seconds to a few minutes even on a loaded CPU; paper and fast presets
# may compile for many minutes and run long steps (LLMs, big batches).
DEFAULT_STALL_TIMEOUT_S = {"test": 600.0, "paper": 1800.0, "fast": 1800.0}
FALLBACK_STALL_TIMEOUT_S = 1800.0
# After a stall: the workload's top process gets SIGTERM (rank 0 may still write
# its partial result) and this long before every rank is killed.
STALL_GRACE_S = 10.0
# Ranks still alive once the workload's top process exited: this long to end by
# themselves (they may be writing their result), then SIGTERM, then SIGKILL.
ORPHAN_EXIT_S = 5.0
ORPHAN_EXIT_SLURM_S = 2.0  # under Slurm the restore's reserve before SIGKILL is short
KILL_WAIT_S = 30.0


def default_timeout_s(preset_kind: str) -> float:
    return DEFAULT_STALL_TIMEOUT_S.get(preset_kind, FALLBACK_STALL_TIMEOUT_S)


class StallWatchdog:
    """Armed when the workload starts; `stalled()` says why the run is stalled, or None."""

    def __init__(self, run_dir: Path, timeout_s: float | None):
        self.path = Path(run_dir) / PROGRESS_FILE
        self.timeout_s = float(timeout_s) if timeout_s else None
        self.started: float | None = None
        self.problem: str | None = None

    def prepare(self) -> dict[str, str]:
        """The progress file, created new (never through a planted link), and the
        environment that names it to the ranks; none (no watchdog) if it cannot be made."""
        if self.timeout_s is None:
            return {}
        from hpcai.safe_files import Folder

        try:
            with Folder.open(self.path.parent) as folder:
                os.close(folder.create_new(self.path.name))
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror or exc}"
            self.timeout_s = None
            return {}
        return {PROGRESS_ENV: str(self.path)}

    def arm(self) -> None:
        self.started = time.time()

    def last_progress(self) -> float | None:
        if self.started is None:
            return None
        try:
            touched = os.stat(self.path, follow_symlinks=False).st_mtime
        except OSError:
            touched = self.started
        return max(self.started, touched)

    def stalled(self) -> str | None:
        last = self.last_progress()
        if self.timeout_s is None or last is None:
            return None
        quiet = time.time() - last
        if quiet <= self.timeout_s:
            return None
        return (f"stalled: no step progress for {quiet:.0f} s (stall timeout "
                f"{self.timeout_s:g} s, --stall-timeout-s); every rank was stopped")

    def close(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass


# ---- every rank of the run --------------------------------------------------------
def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}", follow_symlinks=False).st_uid
    except OSError:
        return None


def ranks_alive(pgid: int | None, tag: str) -> list[int]:
    """The run's processes: every process of this user carrying its tag (ranks in
    sessions of their own, orphans of a dead torchrun), and what the kernel says is
    the run's whatever its environment: this launcher's descendants outside its own
    session (the launcher is their subreaper, so a daemon that cleared its
    environment and left its session is still found)."""
    from hpcai.launcher.power.workload_procs import find

    me = os.getuid()
    found = set(find({"pgid": pgid, "tag": tag})) | set(run_tree())
    return sorted(pid for pid in found if _owner(pid) == me)


def become_subreaper() -> bool:
    """Make this launcher the reaper of its orphaned descendants (prctl
    PR_SET_CHILD_SUBREAPER, Linux 3.4): a process of the run that double-forks is
    re-parented here, not to init, so the process tree still holds it."""
    global _SUBREAPER
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _SUBREAPER = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _SUBREAPER = False
    return _SUBREAPER


_PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER = False


def _stat_fields(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session id) from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def run_tree() -> list[int]:
    """Live descendants of this launcher in sessions other than its own (the
    workload's session, and any a daemon of it made); none unless the launcher is a
    subreaper (else an orphan would have left the tree for init's)."""
    if not _SUBREAPER:
        return []
    children: dict[int, list[int]] = {}
    info = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(int(entry))) is not None:
            info[int(entry)] = fields
            children.setdefault(fields[1], []).append(int(entry))
    own_session, found, todo = os.getsid(0), [], list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        state, _, session = info[pid]
        if state != "Z" and session != own_session:
            found.append(pid)
    return sorted(found)


def command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    from hpcai.printable import printable

    return printable(raw.replace(b"\0", b" ").decode("utf-8", "backslashreplace").strip())[:200]


def reap(pids: list[int]) -> None:
    """Orphans re-parented to this subreaper are its children once they end: reaped,
    so none stays a zombie (only these pids: a Popen's own child is left to it)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pgid: int | None, tag: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    alive = ranks_alive(pgid, tag)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = ranks_alive(pgid, tag)
    return alive


def end_every_rank(pgid: int | None, tag: str, exit_s: float = ORPHAN_EXIT_S,
                   term_s: float = ORPHAN_EXIT_S, outlived: list | None = None) -> list[int]:
    """Wait exit_s for the run's processes to end by themselves, then SIGTERM
    (with SIGCONT: a stopped rank must get to act on it), term_s later SIGKILL,
    and wait until they are gone. The pids still alive after all that (a
    process in uninterruptible sleep), normally none."""
    alive = _wait_gone(pgid, tag, exit_s)
    if not alive:
        return []
    if outlived is not None:  # what outlived the workload: the result says so
        outlived += [{"pid": pid, "command": command_of(pid)} for pid in alive]
    signalled = list(alive)
    _signal_all(alive, signal.SIGTERM)
    _signal_all(alive, signal.SIGCONT)
    alive = _wait_gone(pgid, tag, term_s)
    if alive:
        _signal_all(alive, signal.SIGKILL)
        alive = _wait_gone(pgid, tag, KILL_WAIT_S)
    if alive:
        log(f"{len(alive)} process(es) of the run did not end even after SIGKILL "
            f"({', '.join(map(str, alive[:8]))}); restoring the limits anyway")
    reap(signalled)
    return alive


def mark_stalled(doc: dict, reason: str) -> None:
    """The run's result (or segment's) `failed` for the stall, whatever the
    workload managed to write before its ranks were stopped."""
    from hpcai.timestamps import now_iso

    doc["status"] = "failed"
    doc["error"] = {"type": "Stalled", "message": reason}
    doc.setdefault("timestamps", {})["finished"] = now_iso()
