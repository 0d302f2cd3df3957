"""File access for bundles that assumes company: the launcher may run as root
and a bundle may come from anywhere, so a symlink it did not make is never
followed, only regular files are read, and nothing is ever overwritten."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from hpcai.errors import UsageError

# The signed statement in a bundle's folder: its presence makes the folder a bundle.
ENVELOPE_FILE = "statement.dsse.json"
# A bundle file larger than this is not a result (samples of a week-long run are ~100 MB).
MAX_FILE_BYTES = 1 << 30


def read_regular(path: Path | str, what: str = "file", check=None, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file, refusing symlinks, devices and fifos, and one larger
    than limit before reading it; check(path, stat of the open file) may refuse it (a
    UsageError) before it is read."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist", "give the path of an existing file") from None
    except OSError as exc:
        if Path(path).is_symlink():
            raise UsageError(f"{what} {path} is a symbolic link: not followed",
                             "give the file itself") from None
        raise UsageError(f"{what} {path} cannot be read ({exc.strerror})", "check its permissions") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{what} {path} is not a regular file", "give a plain file")
        if check is not None:
            check(path, info)
        if info.st_size > limit:
            raise UsageError(f"{what} {path} is larger than {limit >> 20} MB",
                             "a bundle holds result files, not data sets")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit + 1)[:limit]  # a file grown since the check stays bounded
    finally:
        os.close(fd)


def write_new(path: Path | str, data: bytes, mode: int = 0o644) -> None:
    """Create path with data, atomically (hpcai/safe_files.py Folder.creating: whole or
    not at all); an existing file (or link) there is an error, never replaced. The
    folder is the one the path names (links above the file followed, as the user's)."""
    from hpcai.safe_files import Folder, umask

    path = Path(path)
    try:
        with Folder.open(os.path.realpath(path.parent)) as folder, \
                folder.creating(path.name, mode=mode & ~umask(), durable=True) as fh:
            fh.write(data)
    except FileExistsError:
        raise UsageError(f"{path} already exists: not overwritten",
                         "choose another path, or move the file away") from None
    except OSError as exc:
        raise UsageError(f"cannot create {path} ({exc.strerror})",
                         "check that its folder exists and is writable") from None


def new_folder(path: Path | str) -> Path:
    """Make the bundle's folder: it must not exist, or be an empty folder (not a link)."""
    path = Path(path)
    if path.is_symlink():
        raise UsageError(f"{path} is a symbolic link: not followed", "give a real folder path")
    if path.exists():
        if not path.is_dir() or any(path.iterdir()):
            raise UsageError(f"{path} already exists and is not an empty folder",
                             "give -o a new folder")
        return path
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"cannot create {path} ({exc.strerror})", "check the parent folder") from None
    return path


def list_tree(root: Path) -> list[str]:
    """Every file under root, relative and sorted; a link or special file is an error."""
    found = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in dirs + names:
            full = Path(folder) / name
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                raise UsageError(f"{full} is a symbolic link: a bundle holds only plain files",
                                 "the bundle was altered; fetch it again from its source")
            if name in names and not stat.S_ISREG(mode):
                raise UsageError(f"{full} is not a regular file",
                                 "the bundle was altered; fetch it again from its source")
            if name in names:
                found.append(full.relative_to(root).as_posix())
    return sorted(found)
