"""Writing where another user may have planted links: never through a
symbolic link, never into a file someone else made.

A folder is opened once (O_DIRECTORY | O_NOFOLLOW: a link in its place is
refused, ELOOP); files are made inside it through that descriptor with
O_CREAT | O_EXCL | O_NOFOLLOW, written in full, synced, and renamed over the
name within the same descriptor (or linked to it, for a file that must be
new: Folder.creating), so a reader sees the old file or the new one, and a
link planted at the name is replaced, never written through. This is the one
atomic write: every other module writes through it.
Folders are made with mkdir, which never follows a link either (an existing
name, link or not, is EEXIST).

Used by every writer of run folders, results, samples, sweep folders and
reports (launcher/run/output_check.py, launcher/sweep/driver.py, launcher/report/,
hpcai/result_document.py), power and clock journals (launcher/power/journal.py). The base
of a path, the folder a user names with
--output, is theirs to point anywhere; below it nothing is followed.
"""
from __future__ import annotations

import contextlib
import io
import os
import secrets
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Whatever the umask (002 on many HPC systems): never writable by group or others.
FILE_MODE = 0o644
FOLDER_MODE = 0o755


def umask() -> int:
    """This process's umask, read without changing it (Linux: another thread may be
    making files meanwhile), else by a swap."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Folder:
    """An open folder; files and folders are made inside it by descriptor."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, Path(path)

    @classmethod
    def open(cls, path, create: bool = False) -> Folder:
        """The folder at path (its last part never a link); create: made if missing,
        with its parents (those as the user named them)."""
        path = Path(path)
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, FOLDER_MODE)
        return cls(os.open(path, _DIR_FLAGS), path)

    def folder(self, name: str, exclusive: bool = False) -> Folder:
        """A folder inside this one: made (exclusive: it must not exist yet), then
        opened without following a link."""
        _plain_name(name)
        try:
            os.mkdir(name, FOLDER_MODE, dir_fd=self.fd)
        except FileExistsError:
            if exclusive:
                raise
        return Folder(os.open(name, _DIR_FLAGS, dir_fd=self.fd), self.path / name)

    @contextlib.contextmanager
    def replacing(self, name: str, mode: int | None = None, durable: bool = False):
        """A binary file object; on success its content becomes `name`, atomically.
        durable: the folder is synced after the rename too, so the new name itself
        survives a crash (a power journal, a GPU's holder record)."""
        with self._published(name, mode, durable, os.replace) as fh:
            yield fh

    @contextlib.contextmanager
    def creating(self, name: str, mode: int | None = None, durable: bool = False):
        """As replacing, but `name` must not exist: the whole file is linked to it
        (FileExistsError when it exists, that file untouched: of two writers racing
        for one name, the second fails)."""
        with self._published(name, mode, durable, os.link) as fh:
            yield fh

    def sync(self) -> None:
        """The folder's entries to disk (some filesystems refuse fsync on a folder)."""
        with contextlib.suppress(OSError):
            os.fsync(self.fd)

    @contextlib.contextmanager
    def _published(self, name: str, mode: int | None, durable: bool, publish):
        """The one atomic write: a new temporary file (O_EXCL | O_NOFOLLOW) written
        whole and fsynced, then published as `name` within this folder."""
        _plain_name(name)
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, _NEW_FILE_FLAGS, 0o600, dir_fd=self.fd)
        try:
            # Readable as the umask allows (a shared folder stays readable by the
            # group), never writable by others: resume and the report trust only
            # results no one else could have written (hpcai/ownership.py).
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), (FILE_MODE & ~umask()) if mode is None else mode)
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            publish(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            if durable:
                self.sync()
        finally:
            with contextlib.suppress(OSError):  # gone already once renamed
                os.unlink(tmp, dir_fd=self.fd)

    @contextlib.contextmanager
    def replacing_text(self, name: str, newline: str | None = None):
        with self.replacing(name) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace",
                                    newline=newline, write_through=True)
            yield text
            text.flush()
            text.detach()

    def write_bytes(self, name: str, data: bytes) -> Path:
        with self.replacing(name) as fh:
            fh.write(data)
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8", "backslashreplace"))

    def create_new(self, name: str, mode: int = 0o644) -> int:
        """A new, empty file's descriptor (O_EXCL: a planted name or link is EEXIST)."""
        _plain_name(name)
        return os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_append(path, mode: int = 0o666):
    """An unbuffered binary file appending to path, made if missing: its last part
    never a link (O_NOFOLLOW: a planted link is ELOOP, never appended through)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    return os.fdopen(fd, "ab", buffering=0)


@contextlib.contextmanager
def written_by_a_tool(path):
    """A path for another program (DuckDB's COPY, a build) to write whole, in a private
    folder made beside `path`; on success renamed over `path` within its folder (a link
    planted at the name is replaced, never written through), always cleaned up."""
    import shutil
    import tempfile

    path = Path(path)
    private = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    temp = private / path.name
    try:
        yield temp
        with Folder.open(path.parent) as folder:
            os.replace(temp, path.name, dst_dir_fd=folder.fd)
    finally:
        shutil.rmtree(private, ignore_errors=True)  # ours alone (0700): whatever the tool left there


def _plain_name(name: str) -> None:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")


def write_json(path, doc: dict, **dump) -> None:
    """doc as JSON at path: its folder opened without following a link, the file
    replaced atomically within it."""
    import json

    path = Path(path)
    text = json.dumps(doc, **dump)
    with Folder.open(path.parent) as folder:
        folder.write_text(path.name, text + "\n")
