"""Finding and stopping a run's workload after its launcher died.

The journal names the workload's process group (torchrun's, or the single
entrypoint's) and a tag every workload process carries in its environment
(launcher/run/lifeline.py): torchrun starts each rank in a session of its own,
so the group alone would miss them. Only this user's processes on this node
are looked at (the journal is per node).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from hpcai.launcher.run.lifeline import TAG_ENV

STOP_GRACE_S = 15.0  # SIGTERM first: the workload writes its interrupted result


def _pgid_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None  # a zombie holds no GPU
    return int(fields[2])


def _has_tag(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def find(workload: dict | None) -> list[int]:
    """Live pids of the workload a journal records ({"pgid": int, "tag": str})."""
    if not workload:
        return []
    tag = workload.get("tag")
    marker = f"{TAG_ENV}={tag}".encode() if tag else None
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        group = _pgid_of(pid)
        if group is None:
            continue
        # The tag, never the group alone: a planted journal naming an unrelated
        # process group must not make root stop it (issue 25).
        if marker and _has_tag(pid, marker):
            found.append(pid)
    return sorted(found)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def stop(workload: dict, grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM the workload's topmost processes (torchrun forwards it to its ranks
    once; a second signal would make it abandon their clean-up), SIGKILL what is
    left after grace_s; the pids still alive after that (none, normally)."""
    pids = find(workload)
    roots = [pid for pid in pids if _parent(pid) not in pids]
    for pid in pids:
        for sig in ((signal.SIGTERM, signal.SIGCONT) if pid in roots else (signal.SIGCONT,)):
            try:
                os.kill(pid, sig)  # SIGCONT: a stopped process must get to act on it
            except (ProcessLookupError, PermissionError):
                pass
    for wait_s, sig in ((grace_s, signal.SIGKILL), (5.0, None)):
        deadline = time.monotonic() + wait_s
        while find(workload) and time.monotonic() < deadline:
            time.sleep(0.2)
        if sig is not None:
            for pid in find(workload):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
    return find(workload)


def describe(workload: dict, pids: list[int]) -> str:
    shown = ", ".join(map(str, pids[:8])) + (" ..." if len(pids) > 8 else "")
    return f"{len(pids)} process(es) of its workload (process group {workload.get('pgid')}: {shown})"
