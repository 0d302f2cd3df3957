"""Whether a result on disk can be believed: resume skips only slots whose
result it can trust, and the report counts only such results.

In a results folder another user can write, anyone could plant a forged
`complete` result: resume would skip that slot for good and the report would
average the forgery in. A result is trusted when the file is a regular file
(not a link) owned by this user or root and writable by no one else, and its
run folder and the folder holding that are owned by this user or root and
writable by no one else (a world-writable folder with the sticky bit, /tmp
style, lets others add entries but not replace ours: the owner checks hold).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from hpcai.ownership import OTHERS_WRITE as _OTHERS_WRITE
from hpcai.ownership import owner_ok as _owner_ok
from hpcai.ownership import written_by_us  # noqa: F401 (imported from here by the launcher)

# The rule itself lives in hpcai/ownership.py: the workloads' batch cache uses it too.


def folder_chain_problem(folder: Path) -> str | None:
    """Why a folder or one above it may not be trusted under the rule above (a
    folder missing at the bottom is skipped: only the one above could make it);
    None when every one may. Root code reads a file it trusts only from such a
    folder: one that others can write lets them remove or replace the file."""
    folder = Path(os.path.realpath(folder))
    for part in (folder, *folder.parents):
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{part} cannot be read ({exc.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{part} is not a folder"
        if not _owner_ok(st.st_uid):
            return f"{part} belongs to uid {st.st_uid}"
        if not written_by_us(st, folder=True):
            return f"{part} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted(result: Path) -> str | None:
    """Why the result file cannot be trusted, in a few words naming the path; None if it can."""
    result = Path(result)
    try:
        st = os.lstat(result)
    except OSError as exc:
        return f"{result} cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{result} is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return f"{result} is not a regular file"
    if not _owner_ok(st.st_uid):
        return f"{result} belongs to uid {st.st_uid}, not to you (or root)"
    if st.st_mode & _OTHERS_WRITE:
        return f"{result} can be written by other users"
    for folder in (result.parent, result.parent.parent):
        try:
            fst = os.stat(folder)
        except OSError as exc:
            return f"{folder} cannot be read ({exc.strerror})"
        if not _owner_ok(fst.st_uid):
            return f"{folder} belongs to uid {fst.st_uid}, not to you (or root)"
        if fst.st_mode & _OTHERS_WRITE and not fst.st_mode & stat.S_ISVTX:
            return f"{folder} can be written by other users"
    return None


HOW_TO_TRUST = ("keep results in folders only you can write (chmod go-w), "
                "or copy them into one")


def refuse_planted(folder: Path, what: str) -> None:
    """A folder hpcai names predictably (a sweep's) that exists must be a real
    folder of this user's (or root's) that no one else can write: else someone
    may have planted it to redirect the writes, or forge what resume reads."""
    from hpcai.errors import UsageError

    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"cannot read {what} {folder} ({exc.strerror})",
                         "check the results folder") from None
    fix = "move it aside (someone else may have made it) and run again"
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{what} {folder} is a symbolic link: hpcai never writes through one",
                         fix)
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {folder} is not a folder", fix)
    if not _owner_ok(st.st_uid):
        raise UsageError(f"{what} {folder} belongs to uid {st.st_uid}, not to you", fix)
    if st.st_mode & _OTHERS_WRITE:
        raise UsageError(f"{what} {folder} can be written by other users",
                         f"chmod go-w {folder} if it is yours, else {fix}")


def claim_folder(folder: Path, what: str) -> None:
    """The folder made now, exclusively (mkdir: a name planted meanwhile, link or
    not, is EEXIST and then checked), or the existing one checked."""
    refuse_planted(folder, what)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o755)  # never writable by others, whatever the umask
    except FileExistsError:
        refuse_planted(folder, what)
