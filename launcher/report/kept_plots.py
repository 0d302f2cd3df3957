"""Plots kept from the last report made into the same folder, where what they
are drawn from has not changed.

Drawing is matplotlib's seconds at any size: about 4 s of a core for a fleet's
report, the most of any step once the results index is warm, and a report made
again over the same results draws the same figures. The figures' worker gets
what it draws as pickles (report/forked.py Inbox); a group of plots (the cells'
plots, the rooflines, the studies' plots) is keyed by the sha256 of those
bytes, of hpcai's and matplotlib's versions and of the report's own source.
plots/.kept-plots.json records each group's key, what its drawing returned and
the sha256 of every file it wrote.

A group is kept only when its key is the same and each of its files is still
the one written: a regular file (not a link) of this user's or root's that no
one else can write, with the recorded hash, in a plots folder no one else can
write (launcher/site/trust.py's rule for results). Anything else is drawn again:
an unreadable or edited record costs the time of drawing, never a wrong plot.
Deleting the record (or the plots folder) draws everything again.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

RECORD = ".kept-plots.json"
RECORD_MAX = 4 * 2 ** 20  # bytes: a record is a few KB; anything larger is not ours
PLOT_MAX = 64 * 2 ** 20  # bytes of one PNG or SVG to hash before it is kept


class KeptPlots:
    """The plots folder's record: groups drawn (or kept) by draw(), written by save()."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.kept: list[str] = []  # the groups kept, for tests and the curious
        self._before = _read_record(self.folder)
        self._now: dict[str, dict] = {}

    def draw(self, group: str, digest: str | None, fn, *args):
        """fn(folder, *args), or what it returned last time when digest (the sha256 of
        what args were made from; None: never kept) and every file are unchanged."""
        key = None if digest is None else _key(group, digest)
        old = self._before.get(group)
        if key is not None and isinstance(old, dict) and old.get("key") == key:
            value = _decode(old.get("value"), self.folder)
            files = old.get("files")
            if value is not None and isinstance(files, dict) and \
                    set(files) == set(_file_names(value)) and self._unchanged(files):
                self._now[group] = old
                self.kept.append(group)
                return value
        value = fn(self.folder, *args)
        if key is not None:
            hashes = {name: _hash_of(self.folder, name) for name in _file_names(value)}
            if None not in hashes.values():
                self._now[group] = {"key": key, "value": _encode(value), "files": hashes}
        return value

    def save(self) -> None:
        """The record of this report's groups (a group drawn without a key has none)."""
        from hpcai.safe_files import Folder

        if not self.folder.is_dir():
            return  # nothing was drawn
        text = json.dumps({"version": 1, "groups": self._now}, ensure_ascii=True)
        try:
            with Folder.open(self.folder.parent) as report, report.folder(self.folder.name) as plots:
                plots.write_text(RECORD, text)
        except OSError:
            pass  # a record is a cache: without it the next report draws everything

    def _unchanged(self, files: dict) -> bool:
        return all(isinstance(sha, str) and _hash_of(self.folder, name) == sha
                   for name, sha in files.items())


def _key(group: str, digest: str) -> str:
    import matplotlib

    import hpcai

    parts = [group, digest, hpcai.__version__, matplotlib.__version__, _source_digest()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


_SOURCE: list[str] = []


def _source_digest() -> str:
    """The report's own code (a plot drawn by other code is another plot)."""
    if not _SOURCE:
        digest = hashlib.sha256()
        for path in sorted(Path(__file__).parent.glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        _SOURCE.append(digest.hexdigest())
    return _SOURCE[0]


def _read_record(folder: Path) -> dict:
    data = _read_ours(folder, RECORD, RECORD_MAX)
    if data is None:
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    groups = doc.get("groups") if isinstance(doc, dict) and doc.get("version") == 1 else None
    return groups if isinstance(groups, dict) else {}


def _hash_of(folder: Path, name: str) -> str | None:
    data = _read_ours(folder, name, PLOT_MAX)
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read_ours(folder: Path, name: str, limit: int) -> bytes | None:
    """The file's bytes if this user (or root) wrote it and no one else could have:
    the plots folder and the file opened without following a link, checked by
    their descriptors (nothing can be swapped in between); else None."""
    from hpcai.launcher.site.trust import written_by_us
    from hpcai.ownership import stat_problem
    from hpcai.safe_files import Folder

    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        return None
    try:
        with Folder.open(folder) as opened:
            if not written_by_us(os.fstat(opened.fd), folder=True):
                return None
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=opened.fd)  # O_NONBLOCK: a FIFO never blocks
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if stat_problem(st, name, kind="file") or st.st_size > limit:
                    return None
                return fh.read(limit + 1)
    except OSError:
        return None


# What a group's drawing returns: Plots in lists, tuples and dicts of lists, and text.
def _encode(value):
    from hpcai.launcher.report.plots import Plot

    if isinstance(value, Plot):
        return {"plot": [value.name, value.title, value.caption]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    return value


def _decode(value, folder: Path):
    """_encode's value back; None where the record holds anything else."""
    from hpcai.launcher.report.plots import Plot

    if isinstance(value, str):
        return value
    if isinstance(value, list):
        items = [_decode(v, folder) for v in value]
        return None if any(i is None for i in items) else items
    if isinstance(value, dict) and len(value) == 1:
        if isinstance(value.get("plot"), list) and len(value["plot"]) == 3 and \
                all(isinstance(t, str) for t in value["plot"]):
            name, title, caption = value["plot"]
            if not name or "/" in name or name.startswith("."):
                return None
            return Plot(name, title, caption, folder / f"{name}.png", folder / f"{name}.svg")
        if isinstance(value.get("dict"), dict):
            items = {k: _decode(v, folder) for k, v in value["dict"].items()}
            return None if any(i is None for i in items.values()) else items
    return None


def _file_names(value) -> list[str]:
    from hpcai.launcher.report.plots import Plot

    if isinstance(value, Plot):
        return [value.png.name, value.svg.name]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _file_names(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _file_names(v)]
    return []
