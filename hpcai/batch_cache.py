"""The batch sizes `--batch-size auto` chose, kept per GPU model, workload and
memory settings, so the next run on the same kind of GPU starts at once.

One JSON file per key in <state folder>/batch-cache/ (hpcai/state_dir.py). The
key hashes the GPU's name and memory, the workload, the framework's version and
every parameter except those that cannot change a step's memory (NO_MEMORY_EFFECT):
image size, precision, compile, channels_last, model size, seq_len... all count,
whatever the workload calls them. An entry is written atomically and never
through a link (hpcai/safe_files.py), and read only when it and its folders could
have been written by no one but this user or root (hpcai/ownership.py): a planted
entry is ignored, never used. The search re-validates a cached batch with one
step before using it (workloads/batch_search.py).

The cache never fails a run: a folder that cannot be made or trusted means a
fresh search, and the result says why. HPCAI_BATCH_CACHE=off searches afresh
and writes nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass

from hpcai.ownership import stat_problem, written_by_us
from hpcai.safe_files import Folder
from hpcai.state_dir import state_dir

FORMAT = 1
FOLDER = "batch-cache"
ENV = "HPCAI_BATCH_CACHE"
OFF_VALUES = ("off", "0", "no", "false")
# Parameters that change how long or from where a run trains, never a step's memory.
NO_MEMORY_EFFECT = frozenset({"batch_size", "batch_search_start", "lr", "data", "data_workers"})
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def enabled(environ=None) -> bool:
    value = (os.environ if environ is None else environ).get(ENV, "on")
    return value.strip().lower() not in OFF_VALUES


def describe_key(device: str, memory_bytes: int | None, workload: str, framework: str,
                 params: dict) -> dict:
    """What the key hashes (recorded in the entry and the result)."""
    settings = {k: v for k, v in sorted(params.items()) if k not in NO_MEMORY_EFFECT}
    return {"device": device, "memory_bytes": memory_bytes, "workload": workload,
            "framework": framework, "settings": settings}


def key_of(description: dict) -> str:
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass
class BatchCache:
    """The cache entry for one key. writer: whether this process writes it (one
    process per node: the others would write the same thing)."""

    description: dict
    writer: bool = True
    folder: object = None  # the state folder; None: state_dir() now

    @property
    def key(self) -> str:
        return key_of(self.description)

    def _path(self):
        return (self.folder or state_dir()) / FOLDER / f"{self.key}.json"

    def lookup(self) -> tuple[dict | None, str | None]:
        """(entry, None), or (None, why there is none to use)."""
        path = self._path()
        problem = _untrusted_folders(path.parent)
        if problem:
            return None, problem
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None, "no entry for this key"
        except OSError as exc:
            return None, f"{path} cannot be read ({exc.strerror})"
        with os.fdopen(fd, "rb") as fh:
            why = stat_problem(os.fstat(fh.fileno()), "it", kind="file")
            if why:
                return None, f"{path} is not a file only you (or root) could have written ({why}): ignored"
            try:
                entry = json.loads(fh.read(65536))
            except ValueError:
                return None, f"{path} is not JSON: ignored"
        return _checked(entry, self.key, path)

    def store(self, batch_size: int, method: str) -> str | None:
        """Write the entry (writer only); the reason it was not written, else None."""
        if not self.writer:
            return "another process of this run writes it"
        entry = {"format": FORMAT, "key": self.key, "batch_size": int(batch_size),
                 "method": method, "found_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 **self.description}
        path = self._path()
        try:
            with Folder.open(path.parent.parent, create=True) as base:
                if not written_by_us(os.fstat(base.fd), folder=True):
                    return f"the state folder {base.path} can be written by others: not written"
                with base.folder(FOLDER) as folder:
                    if not written_by_us(os.fstat(folder.fd), folder=True):
                        return f"{folder.path} can be written by others: not written"
                    folder.write_text(path.name, json.dumps(entry, indent=1, default=str) + "\n")
        except OSError as exc:
            return f"cannot write {path} ({exc.strerror or exc})"
        return None


def _untrusted_folders(folder) -> str | None:
    """Why the cache folder or the state folder above it cannot be trusted (the one
    trust check, hpcai/ownership.py); None if both can."""
    for each in (folder, folder.parent):
        try:
            why = stat_problem(os.lstat(each), each, kind="folder", sticky_ok=True)
        except FileNotFoundError:
            return "no entry for this key"
        except OSError as exc:
            return f"{each} cannot be read ({exc.strerror})"
        if why:
            return f"{why}: ignored, as anything a folder written by others holds"
    return None


def _checked(entry, key: str, path) -> tuple[dict | None, str | None]:
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None, f"{path} is of another format or key: ignored"
    batch = entry.get("batch_size")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        return None, f"{path} holds no positive batch size: ignored"
    return entry, None
