"""The one trust check: whether a file or folder could only have been written by
the owners a caller allows (by default this user or root). Every "can I trust
this" question in the launcher, the power helper and the workloads (the batch-size
cache) asks it here, each with its own owners and forbidden mode bits, so it lives
below them all and imports only the standard library (the helper runs as root).

A path is trusted when it is no symbolic link, of the kind asked for, owned by one
of the allowed uids, and has none of the forbidden mode bits (by default group and
other write); `above` folders over it must pass the same owners and bits, where a
folder with the sticky bit (/tmp style) may let others add entries but not replace
ours.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
OTHERS_ANY = 0o077  # read, write or search by group or others: a secret's rule (ssh's 0600)
ALL_ABOVE = -1  # `above`: every folder up to /


def us_or_root() -> frozenset[int]:
    return frozenset((os.geteuid(), 0))


def owner_ok(uid: int) -> bool:
    return uid in us_or_root()


def stat_problem(st: os.stat_result, subject, owners=None, forbidden: int = OTHERS_WRITE,
                 kind: str | None = None, sticky_ok: bool = False) -> str | None:
    """Why the file or folder whose stat this is (read from a descriptor or by lstat)
    is not trusted, as "<subject> is/belongs/can ..."; None when it is.
    owners: the allowed uids (None: this user or root); forbidden: the mode bits it
    must not have; kind: "file" or "folder" when it must be one; sticky_ok: a folder
    with the sticky bit may have forbidden write bits."""
    owners = us_or_root() if owners is None else frozenset(owners)
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return f"{subject} is a symbolic link"
    if kind == "file" and not stat.S_ISREG(mode):
        return f"{subject} is not a regular file"
    if kind == "folder" and not stat.S_ISDIR(mode):
        return f"{subject} is not a folder"
    if st.st_uid not in owners:
        return f"{subject} belongs to uid {st.st_uid}, not to {_whom(owners)}{_named(st.st_uid)}"
    bad = mode & forbidden
    if sticky_ok and stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
        bad &= ~OTHERS_WRITE
    if bad:
        return _mode_problem(subject, stat.S_IMODE(mode), bad)
    return None


def path_problem(path, owners=None, forbidden: int = OTHERS_WRITE, kind: str | None = None,
                 above: int = 0) -> str | None:
    """stat_problem for the path itself (never followed if a link), and for `above`
    folders over it (ALL_ABOVE: up to /; links among them resolved, folders missing at
    the bottom skipped: only the one above could make them); None when all pass."""
    path = Path(path)
    try:
        why = stat_problem(os.lstat(path), path, owners, forbidden, kind)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if why or not above:
        return why
    return chain_problem(path.parent, owners, forbidden, None if above == ALL_ABOVE else above)


def chain_problem(folder, owners=None, forbidden: int = OTHERS_WRITE, count: int | None = None) -> str | None:
    """Why `folder` or one of the `count` folders from it upwards (None: up to /) is not
    trusted; None when every one is."""
    folder = Path(os.path.realpath(folder))
    chain = (folder, *folder.parents)
    for part in chain if count is None else chain[:count]:
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{part} cannot be read ({exc.strerror})"
        why = stat_problem(st, part, owners, forbidden, "folder", sticky_ok=True)
        if why:
            return why
    return None


def written_by_us(st: os.stat_result, folder: bool = False) -> bool:
    """For one file's (or, folder: a folder's) stat, read from a descriptor: owned
    by this user or root, and writable by no one else (a folder may let others add
    entries under the sticky bit)."""
    return stat_problem(st, "", sticky_ok=folder) is None


def _whom(owners: frozenset[int]) -> str:
    me = os.geteuid()
    if me in owners:
        return "you or root" if 0 in owners and me != 0 else "you"
    return ", ".join("root" if uid == 0 else f"uid {uid}" for uid in sorted(owners)) or "no one"


def _named(uid: int) -> str:
    """ (owned by NAME), when the uid has a name: what a person recognises."""
    try:
        import pwd

        return f" (owned by {pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return ""


def _mode_problem(subject, mode: int, bad: int) -> str:
    if bad & 0o044:
        return f"{subject} can be read or written by other users (mode {mode:04o})"
    if bad & OTHERS_WRITE:
        return f"{subject} can be written by other users (group- or world-writable, mode {mode:04o})"
    return f"{subject} has mode {mode:04o}, with bits {bad:04o} it must not have"
