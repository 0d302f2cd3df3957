"""The power journal: what to restore if a capped run dies without cleaning up.

It is written (atomically, fsynced) before any limit changes and removed only
after every GPU is back, so a SIGKILL or a node crash leaves a record that
`hpcai-launch power restore` can act on. One file per host, because home
directories are shared between nodes.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from hpcai.errors import ConfigError, PowerError

FORMAT = 1
STATE_DIR_HINT = "set HPCAI_STATE_DIR to a writable directory on this node"


def default_journal_path(hostname: str | None = None) -> Path:
    """$HPCAI_STATE_DIR, else $XDG_STATE_HOME/hpcai, else ~/.local/state/hpcai."""
    from hpcai.state_dir import state_dir

    hostname = hostname or socket.gethostname()
    return state_dir() / f"power-journal-{hostname}.json"


def write_journal(path, method: str, snapshot: dict[int, dict]) -> dict:
    """Record the limits to restore. snapshot: {index: {"uuid": str, "limit_w": float}}."""
    record = {
        "format": FORMAT,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "method": method,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "created_unix": time.time(),
        "gpus": [
            {"index": int(i), "uuid": s.get("uuid"), "limit_w": float(s["limit_w"])}
            for i, s in sorted(snapshot.items())
        ],
    }
    write_new_record(path, record, "power journal")
    return record


def write_new_record(path, record: dict, what: str) -> None:
    """A journal (`what`) created atomically and exclusively in its state folder
    (made 0700; refused when another user could write it): of two launchers
    racing to write one journal, the second gets StaleJournalError."""
    from hpcai.errors import StaleJournalError
    from hpcai.safe_files import Folder

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise PowerError(f"cannot write the {what} {path}: {exc}", STATE_DIR_HINT) from exc
    check_state_dir(path.parent)
    text = json.dumps(record, indent=2) + "\n"
    try:
        # Linked to its name only whole and fsynced: never replaces another run's.
        with Folder.open(path.parent) as folder, folder.creating(path.name, mode=0o600, durable=True) as f:
            f.write(text.encode())
    except FileExistsError:
        raise StaleJournalError(
            f"a {what} appeared at {path} while this run was starting (another run uses it)",
            "give each concurrent run its own --journal, or wait for the other run to end") from None
    except OSError as exc:
        raise PowerError(f"cannot write the {what} {path}: {exc}", STATE_DIR_HINT) from exc


def check_state_dir(directory) -> None:
    """PowerError (one line) unless the state folder is ours alone: not a link,
    owned by this user (root: by root), not group- or world-writable."""
    from hpcai.launcher.power.authority import private_problem

    directory = Path(directory)
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise PowerError(f"cannot use the state folder {directory}: {exc.strerror}", STATE_DIR_HINT) from None
    problem = private_problem(st, os.geteuid(), directory=True)
    if problem:
        raise PowerError(f"refusing the state folder {directory}: {problem}",
                         f"use a folder only you can write (chmod 700, owned by you), or {STATE_DIR_HINT}")


def check_journal_file(path) -> None:
    """PowerError unless the journal is a regular file this user wrote, in a
    state folder that passes check_state_dir: a planted one is never acted on."""
    from hpcai.launcher.power.authority import private_problem

    path = Path(path)
    check_state_dir(path.parent)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PowerError(f"cannot read the journal {path}: {exc.strerror}") from None
    problem = private_problem(st, os.geteuid(), directory=False)
    if problem:
        raise PowerError(f"refusing the journal {path}: {problem}",
                         "it was not written by an hpcai run of yours; check it, restore the limits by "
                         "hand if needed, then delete it")


def read_record_text(path, what: str) -> str | None:
    """A journal's text; None when there is none; ConfigError when unreadable."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    check_journal_file(path)  # a planted or foreign journal is refused, never read
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "r", encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc}") from exc


def load_journal(path) -> dict | None:
    """The journal record, None when there is none; ConfigError when unreadable."""
    path = Path(path)
    text = read_record_text(path, "power journal")
    if text is None:
        return None
    try:
        record = json.loads(text)
        gpus = record["gpus"]
        for g in gpus:
            int(g["index"]), float(g["limit_w"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"the power journal {path} is unreadable ({exc})",
            "restore the limits by hand (e.g. nvidia-smi -i N -pl WATTS), then delete the file",
        ) from exc
    return record


def remove_journal(path) -> None:
    path = Path(path)
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise PowerError(
            f"power limits are restored but the journal {path} could not be removed: {exc}",
            "delete it by hand, or the next capped run will refuse to start",
        ) from exc
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory
    finally:
        os.close(fd)


def record_workload(path, pgid: int, tag: str) -> None:
    """Add the workload's process group and tag, once it has started, so that
    `power restore` will not lift a cap under a workload still running."""
    record = load_journal(path)
    if record is None:
        return
    record["workload"] = {"pgid": int(pgid), "tag": tag}
    _write_record(Path(path), record)


def _write_record(path: Path, record: dict) -> None:
    """Atomically (0600, no link followed) through hpcai/safe_files.py, the folder
    synced after the rename so the record itself survives a crash."""
    from hpcai.safe_files import Folder

    try:
        with Folder.open(path.parent) as folder, folder.replacing(path.name, mode=0o600, durable=True) as f:
            f.write((json.dumps(record, indent=2) + "\n").encode())
    except OSError as exc:
        raise PowerError(f"cannot write the power journal {path}: {exc}", STATE_DIR_HINT) from exc
