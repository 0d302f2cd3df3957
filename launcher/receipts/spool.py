"""The receipts' spool: a root-owned folder (the site's `[receipts] spool`,
/var/spool/hpcai/receipts by default) that no one else can write, where each
receipt is written atomically, never through a link (hpcai/safe_files.py).

A job's prolog leaves `<job>.<restarts>.<node>.start.json`; its epilog writes
`<job>.<restarts>.<node>.json` and only then removes the start file, so a full
disk or a crash between them loses nothing: the start file stays until a
complete receipt replaces it. Receipts stay in the spool when the results store
is down; `hpcai-launch results jobs` ingests them when it runs.
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from pathlib import Path

from hpcai.errors import ConfigError, HpcaiError
from hpcai.launcher.site.trust import written_by_us
from hpcai.ownership import stat_problem
from hpcai.safe_files import Folder

DEFAULT_SPOOL = Path("/var/spool/hpcai/receipts")
START_SUFFIX = ".start.json"


class SpoolError(HpcaiError):
    """A receipt could not be written or read in the spool."""


def spool_path(site_raw: dict | None) -> Path:
    spool = ((site_raw or {}).get("receipts") or {}).get("spool")
    return Path(spool) if spool else DEFAULT_SPOOL


def open_spool(path: Path, create: bool) -> Folder:
    """The spool, opened without following a link and refused when anyone but this
    user (root) could write it: a receipt there must be one hpcai wrote."""
    try:
        folder = Folder.open(path, create=create)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise ConfigError(f"the receipts spool {path} is a symbolic link",
                              "make it a real folder owned by root, mode 0755") from None
        raise ConfigError(f"cannot open the receipts spool {path}: {exc.strerror}",
                          "create it as root (mode 0755) or set [receipts] spool in the site file") from None
    why = stat_problem(os.fstat(folder.fd), "it")
    if why:
        folder.close()
        raise ConfigError(f"refusing the receipts spool {path}: {why}",
                          "it must be owned by root and writable by root alone (chmod 0755)")
    return folder


def receipt_name(job_id: str, restarts: int, node: str, start: bool = False) -> str:
    return f"{job_id}.{restarts}.{node}{START_SUFFIX if start else '.json'}"


def write(folder: Folder, name: str, receipt: dict) -> Path:
    """The receipt at name, atomically; a full disk or any write error is one line,
    and the spool keeps whatever it held before."""
    # One line: the store reads receipts as newline-delimited JSON, skipping a broken file.
    text = json.dumps(finite(receipt), allow_nan=False, separators=(",", ":")) + "\n"
    try:
        with folder.replacing(name, mode=0o644) as fh:
            fh.write(text.encode("utf-8"))
    except OSError as exc:
        raise SpoolError(f"cannot write the receipt {folder.path / name}: {exc.strerror}",
                         "free space in the spool's filesystem; the receipt's start record is kept") from None
    return folder.path / name


def finite(value):
    """NaN or infinity (a driver's bad reading) as null: a receipt holds numbers or nothing."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def read(folder: Folder, name: str) -> dict | None:
    """A receipt this user (root) wrote, by name in the spool; None when absent or
    not trustworthy (a link, another owner, unreadable JSON)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder.fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not written_by_us(os.fstat(fh.fileno())):
            return None
        try:
            doc = json.loads(fh.read())
        except ValueError:
            return None
    return doc if isinstance(doc, dict) else None


def start_files(folder: Folder, node: str) -> list[str]:
    """The names of the start files in the spool for this node's runs."""
    tail = f".{node}{START_SUFFIX}"
    return sorted(e.name for e in os.scandir(folder.fd)
                  if e.name.endswith(tail) and not e.name.startswith(".") and e.is_file(follow_symlinks=False))


def remove(folder: Folder, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder.fd)
