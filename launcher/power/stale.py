"""What a dead run may have left behind: its launcher's pid, its workload's
processes. Shared by the cap, clock and profile sessions (session.py,
clocks.py, profiles.py), which each keep a journal of their own."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from hpcai.errors import PowerError

log = logging.getLogger(__name__)


def pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:  # a killed launcher nobody reaped yet is a zombie: it holds nothing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def check_restorable(record: dict, path: Path, force: bool, what: str) -> None:
    """A journal (`what`: "clock journal", ...) is replayed only on the host that
    wrote it, once its run has ended, and never under a workload still running."""
    import socket

    host = socket.gethostname()
    if record.get("hostname") not in (None, host):
        raise PowerError(f"the {what} {path} was written on {record['hostname']}, not on this host "
                         f"({host})", "run `hpcai-launch power restore` on that node")
    if not force and pid_alive(record.get("pid")):
        raise PowerError(f"the run that wrote {path} (pid {record['pid']}) is still running",
                         "stop it first (it restores what it set when it exits), or pass --force")
    stop_or_refuse(record.get("workload"), path, force)


def stop_or_refuse(workload: dict | None, path: Path, force: bool) -> None:
    """A cap must not be lifted under a workload that still runs on it."""
    from hpcai.launcher.power import workload_procs

    pids = workload_procs.find(workload)
    if not pids:
        return
    what = workload_procs.describe(workload, pids)
    if not force:
        raise PowerError(
            f"the run that wrote {path} left {what} still running",
            f"stop it with `kill -TERM -- -{workload.get('pgid')}` and `kill -TERM "
            f"{' '.join(map(str, pids))}` (it writes an interrupted result), or pass --force "
            "to stop it and restore")
    log.warning("stopping %s", what)
    left = workload_procs.stop(workload)
    if left:
        raise PowerError(f"could not stop {workload_procs.describe(workload, left)}",
                         "stop them by hand (kill -KILL), then run `hpcai-launch power restore`")
