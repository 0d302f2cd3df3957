"""`metrics textfile DIR`: the exposition as DIR/hpcai.prom for node_exporter's
textfile collector (--collector.textfile.directory).

node_exporter reads every *.prom in the folder: a folder someone else can write
would let them add or swap series beside ours, so it is refused, as a link in
its place is (safe_files.Folder opens it O_NOFOLLOW, and the trust check is
hpcai/ownership.py's). The file is replaced atomically (a collector never reads
half a file); on a full disk the temporary file goes and the previous
hpcai.prom stays whole.
"""
from __future__ import annotations

import os
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.safe_files import Folder

FILE_NAME = "hpcai.prom"
PROM_MODE = 0o644  # node_exporter runs as its own user: it must read the file


def open_textfile_folder(path: Path) -> Folder:
    """The folder, opened without following a link, and trusted: owned by this user
    or root and writable by no one else (UsageError naming the fix otherwise)."""
    from hpcai.ownership import stat_problem

    try:
        folder = Folder.open(path)
    except OSError as exc:
        raise UsageError(f"cannot open the textfile folder {path} ({exc.strerror or exc}; "
                         "a symbolic link is never followed)",
                         "give an existing folder of yours, e.g. node_exporter's --collector.textfile.directory") \
            from None
    why = stat_problem(os.fstat(folder.fd), "it", kind="folder")
    if why:
        folder.close()
        raise UsageError(f"refusing the textfile folder {path}: {why}, so they could add series beside hpcai's",
                         f"use a folder only you (or root) can write: chmod go-w {path}")
    return folder


def write_textfile(folder: Folder, data: bytes) -> Path:
    """DIR/hpcai.prom replaced atomically; OutputError (one line) when it cannot be."""
    from hpcai.launcher.run.output_check import write_error

    try:
        with folder.replacing(FILE_NAME, mode=PROM_MODE) as fh:
            fh.write(data)
    except OSError as exc:
        raise write_error(folder.path, exc, FILE_NAME,
                          f"free space in {folder.path} (the previous {FILE_NAME} is kept)") from None
    return folder.path / FILE_NAME
