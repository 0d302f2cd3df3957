"""The results folder: writable, with room, and errors on it said in one line.

A full or read-only disk must end a run with a line naming the folder and
the errno, not a traceback, and must never leave an empty or half-written
file that looks like a result.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from hpcai.errors import UsageError

DEFAULT_MIN_FREE_MB = 100.0


class OutputError(UsageError):
    """The results folder cannot take what the run must write."""

    exit_code = 3


def describe(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno else "?"
    return f"[Errno {exc.errno} {code}] {exc.strerror or exc}"


def write_error(folder: Path, exc: OSError, what: str, hint: str) -> OutputError:
    return OutputError(f"cannot write {what} in {folder} ({describe(exc)})", hint)


def check_free_space(folder: Path, min_free_mb: float) -> None:
    """Refuse to start when the results folder (or its nearest existing parent) is short."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free_mb = shutil.disk_usage(probe).free / 1e6
    except OSError:
        return  # check_output_dir says why the folder is unusable
    if free_mb < min_free_mb:
        raise OutputError(
            f"the results folder {folder} has {free_mb:.0f} MB free, less than the "
            f"{min_free_mb:g} MB a run needs",
            "free space, choose another folder with --output, or lower paths.min_free_mb "
            "in the site file")


def min_free_mb(site: dict) -> float:
    return float(site["paths"].get("min_free_mb", DEFAULT_MIN_FREE_MB))


def write_new_json(path: Path, doc: dict, what: str) -> None:
    """Write doc atomically; on a disk error, nothing is left at path."""
    from hpcai.result_document import write_json_atomic

    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        raise write_error(path.parent, exc, what,
                          "free space or make the folder writable, then run again") from None


def remove_if_empty(folder: Path) -> None:
    """A run folder a disk error left without any file goes."""
    try:
        folder.rmdir()
    except OSError:
        pass


def first_write(run_dir: Path, spec: dict, placeholder: dict) -> None:
    """The run folder, spec.json and a `running` result, or none of them."""
    try:
        # Exclusive (a name planted there, link or not, is EEXIST); never writable by
        # others, whatever the umask (launcher/site/trust.py trusts no such folder).
        run_dir.mkdir(mode=0o755, parents=True, exist_ok=False)
    except OSError as exc:
        raise write_error(run_dir.parent, exc, "the run folder",
                          "free space or make the folder writable, then run again") from None
    try:
        write_new_json(run_dir / "spec.json", spec, "the run spec")
        # From now on a result exists: a signal or crash marks it, never leaves it absent.
        write_new_json(run_dir / "result.json", placeholder, "the result")
    except OutputError:
        for name in ("spec.json", "result.json"):
            (run_dir / name).unlink(missing_ok=True)
        remove_if_empty(run_dir)
        raise


def is_disk_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT,
                                                      errno.EFBIG, errno.EIO, errno.EACCES)


def overwrite_in_place(path: Path, doc: dict) -> bool:
    """On a full disk, where a new file cannot be made: rewrite the existing file
    in the blocks it already has, as compact JSON, when that fits. Not atomic,
    but a result marked `failed` beats one left `running`. False if it did not fit."""
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    try:
        if len(text) > path.stat().st_size:
            return False
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text)
            os.ftruncate(fd, len(text))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        return False
    return True
