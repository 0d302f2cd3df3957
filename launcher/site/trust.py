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

from hpcai.ownership import OTHERS_WRITE, chain_problem, owner_ok, path_problem, stat_problem
from hpcai.ownership import written_by_us  # noqa: F401 (imported from here by the launcher)

# The rule itself lives in hpcai/ownership.py (the one trust check): the power helper
# and the workloads' batch cache use it too.


def folder_chain_problem(folder: Path) -> str | None:
    """Why a folder or one above it may not be trusted under the rule above (a
    folder missing at the bottom is skipped: only the one above could make it);
    None when every one may. Root code reads a file it trusts only from such a
    folder: one that others can write lets them remove or replace the file."""
    return chain_problem(folder)


def untrusted(result: Path) -> str | None:
    """Why the result file cannot be trusted, in a few words naming the path; None if it can.
    Its run folder and the folder holding that are checked too."""
    return path_problem(result, kind="file", above=2)


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
    why = stat_problem(st, f"{what} {folder}", kind="folder")
    if why is None:
        return
    fix = "move it aside (someone else may have made it) and run again"
    if stat.S_ISLNK(st.st_mode):
        why += ": hpcai never writes through one"
    elif stat.S_ISDIR(st.st_mode) and st.st_mode & OTHERS_WRITE and owner_ok(st.st_uid):
        fix = f"chmod go-w {folder} if it is yours, else {fix}"
    raise UsageError(why, fix)


def claim_folder(folder: Path, what: str) -> None:
    """The folder made now, exclusively (mkdir: a name planted meanwhile, link or
    not, is EEXIST and then checked), or the existing one checked."""
    refuse_planted(folder, what)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(folder, 0o755)  # never writable by others, whatever the umask
    except FileExistsError:
        refuse_planted(folder, what)
