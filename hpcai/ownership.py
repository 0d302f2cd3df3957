"""Whether a file or folder could only have been written by this user (or root):
the trust rule the launcher (launcher/site/trust.py) and the workloads (the batch-size
cache) share, so it lives below both."""
from __future__ import annotations

import os
import stat

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def owner_ok(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def written_by_us(st: os.stat_result, folder: bool = False) -> bool:
    """For one file's (or, folder: a folder's) stat, read from a descriptor: owned
    by this user or root, and writable by no one else (a folder may let others add
    entries under the sticky bit)."""
    if not owner_ok(st.st_uid):
        return False
    return not st.st_mode & OTHERS_WRITE or (folder and bool(st.st_mode & stat.S_ISVTX))
