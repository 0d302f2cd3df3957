"""The results store: an index of result files in DuckDB, so a report (or
`hpcai-launch results`) over a folder it has seen re-reads only new or changed
files.

Why DuckDB: an embedded, columnar SQL engine in one pip wheel (no server),
whose C++ reader loads a batch of new rows from newline-delimited JSON in one
statement and writes CSV and zstd Parquet for `results export`; queries over
100,000 rows (filters, duplicates) are SQL, not Python loops.

Each file is keyed by its path, size, mtime and inode; a key that still
matches reuses the stored reduction of the file (the report's Run) without
reading it; a changed key re-reads the file and compares its sha256, so a
touched but unchanged file is not parsed again. The index is a cache: deleting
it costs one cold read. It lives under the user's cache folder (one database
per set of input folders) or where HPCAI_RESULTS_INDEX says; a database that is
a symbolic link, not ours, or unusable (locked by another report, broken) is
not used: that report indexes in memory.

Identity of a run is its run id plus the sha256 of its result.json: a second
file with both the same (a copied run folder, a folder and its backup) is
listed as a duplicate of the first (by path), never counted as a repeat.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.launcher.report.ingest import Kit, shown_path


def shown_text(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


INDEX_ENV = "HPCAI_RESULTS_INDEX"
# Bump when what is stored per file changes (Run's fields, the reduction in load.py).
INDEX_FORMAT = 1
COLUMNS = {  # queried by `results ls/show/export`; "run" holds the whole Run
    "path": "VARCHAR", "size": "BIGINT", "mtime_ns": "BIGINT", "ino": "BIGINT",
    "sha256": "VARCHAR", "run_id": "VARCHAR", "status": "VARCHAR", "usable": "BOOLEAN",
    "workload": "VARCHAR", "preset": "VARCHAR", "device": "VARCHAR", "device_full": "VARCHAR",
    "site": "VARCHAR", "host": "VARCHAR", "cap_w": "DOUBLE", "enforced": "BOOLEAN",
    "started": "VARCHAR", "sweep_id": "VARCHAR", "repeat": "INTEGER", "processes": "INTEGER",
    "unit": "VARCHAR", "per_gpu": "DOUBLE", "node_throughput": "DOUBLE",
    "mean_power_w": "DOUBLE", "units_per_joule_with_overhead": "DOUBLE",
    "problems": "VARCHAR", "run": "VARCHAR",
}
_PATH_FIELDS = {"path", "samples_path"}


# ---- finding files --------------------------------------------------------------------
@dataclasses.dataclass
class Found:
    results: list[tuple[Path, os.stat_result]]
    sweeps: list[Path]
    links: list[Path]  # result.json that are symbolic links: listed, never followed
    roots: list[Path]


def walk(paths: list[str | Path], allow_empty: bool = False) -> Found:
    """result.json and sweep.json under the given files and folders. The folders
    given are the user's choice (resolved); below them no symbolic link is followed."""
    found = Found([], [], [], [])
    for given in paths:
        path = Path(given)
        if not path.exists() and not path.is_symlink():
            raise UsageError(f"{shown_path(path)} does not exist", "give result files or folders")
        path = path.resolve()
        found.roots.append(path)
        if path.is_dir():
            _walk_dir(path, found)
        elif path.name == "sweep.json":
            found.sweeps.append(path)
        else:
            found.results.append((path, path.stat()))
    found.results = list({p: (p, st) for p, st in found.results}.values())
    found.results.sort(key=lambda item: item[0])
    found.sweeps = sorted(set(found.sweeps))
    if not found.results and not found.links and not allow_empty:
        raise UsageError(f"no result.json under {', '.join(shown_path(p) for p in paths)}",
                         "give result files, run folders, sweep folders or a results folder")
    return found


def _walk_dir(top: Path, found: Found) -> None:
    stack = [str(top)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # unreadable folder: nothing under it can be listed
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.name == "result.json":
                if entry.is_symlink():
                    found.links.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    found.results.append((Path(entry.path), entry.stat(follow_symlinks=False)))
            elif entry.name == "sweep.json" and entry.is_file(follow_symlinks=False):
                found.sweeps.append(Path(entry.path))


# ---- the index database ---------------------------------------------------------------
def index_location(roots: list[Path]) -> Path:
    given = os.environ.get(INDEX_ENV)
    if given:
        return Path(given)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256("\0".join(sorted(os.fsencode(r).hex() for r in roots)).encode()).hexdigest()
    return base / "hpcai" / "results-index" / f"{key[:24]}.duckdb"


def _safe_location(db: Path) -> str | None:
    """Why db must not be used (None: it may). Its folder is made private; an
    existing file must be a regular file of ours, reached without a link."""
    try:
        db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = os.lstat(db.parent)
        if stat.S_ISLNK(folder.st_mode) or folder.st_uid != os.geteuid():
            return f"{shown_path(db.parent)} is a symbolic link or not ours"
        for path in (db, Path(f"{db}.wal")):
            if os.path.lexists(path):
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                    return f"{shown_path(path)} is not a regular file of ours"
    except OSError as exc:
        return f"{shown_path(db)}: {exc.strerror}"
    return None


def open_index(kit: Kit, roots: list[Path]):
    """(DuckDB connection, note): the cached index, or one in memory with why."""
    try:
        import duckdb
    except ImportError:
        raise UsageError("the results store needs DuckDB, which is not installed",
                         "pip install 'hpcai[report]'") from None

    db = index_location(roots)
    why = _safe_location(db)
    if why is None:
        try:
            con = duckdb.connect(str(db))
            _prepare(con, kit)
            return con, ""
        except duckdb.Error as exc:
            why = " ".join(str(exc).split())[:200]
            if "lock" not in why.lower():  # broken (not busy): it is a cache, so start again
                try:
                    for path in (db, Path(f"{db}.wal")):
                        path.unlink(missing_ok=True)
                    con = duckdb.connect(str(db))
                    _prepare(con, kit)
                    return con, ""
                except (duckdb.Error, OSError):
                    pass
    con = duckdb.connect(":memory:")
    _prepare(con, kit)
    return con, f"results index not used ({why}): every file was read"


def _prepare(con, kit: Kit) -> None:
    con.execute("CREATE TABLE IF NOT EXISTS meta (format INTEGER, hpcai VARCHAR)")
    stamp = (INDEX_FORMAT, _code_stamp(kit))
    if con.execute("SELECT format, hpcai FROM meta").fetchall() != [stamp]:
        con.execute("DROP TABLE IF EXISTS files")
        con.execute("DELETE FROM meta")
        con.execute("INSERT INTO meta VALUES (?, ?)", stamp)
    con.execute("CREATE TABLE IF NOT EXISTS files ("
                + ", ".join(f'"{n}" {t}' for n, t in COLUMNS.items()) + ")")


def _code_stamp(kit: Kit) -> str:
    """The code that reduces a file to a Run, and the schema it is checked against:
    when either changes, the stored reductions are stale."""
    import sys
    from importlib import resources

    from hpcai.launcher.report import ingest

    digest = hashlib.sha256()
    for module in (sys.modules[kit.Run.__module__], ingest):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(resources.files("hpcai").joinpath("schema/result-v1.schema.json").read_bytes())
    return digest.hexdigest()[:16]


# ---- runs in and out of rows ----------------------------------------------------------
def to_blob(run) -> str:
    """The Run as a JSON array in field order (no keys: a third smaller, faster to read)."""
    values = [getattr(run, f.name) for f in dataclasses.fields(run)]
    _FIELDS = [f.name for f in dataclasses.fields(run)]
    for i, name in enumerate(_FIELDS):
        if name in _PATH_FIELDS and values[i]:
            values[i] = os.fsencode(values[i]).hex()
    return json.dumps(values, ensure_ascii=True, separators=(",", ":"))  # lone surrogates as \udcxx


def from_blob(kit: Kit, blob: str):
    values = dict(zip(kit.fields, json.loads(blob)))
    for name in _PATH_FIELDS:
        if values.get(name):
            values[name] = Path(os.fsdecode(bytes.fromhex(values[name])))
    return kit.Run(**values)


def _row(key: str, st: os.stat_result, run, blob: str) -> dict:
    text = shown_text
    return {"path": key, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
            "sha256": run.content_hash, "run_id": text(run.run_id), "status": run.status,
            "usable": run.usable, "workload": text(run.workload), "preset": text(str(run.preset)),
            "device": text(run.device), "device_full": text(run.device_full),
            "site": text(str(run.site)), "host": text(str(run.host)),
            "cap_w": run.cap_w if isinstance(run.cap_w, (int, float)) else None,
            "enforced": run.enforced if isinstance(run.enforced, bool) else None,
            "started": text(str(run.started)) if run.started else None,
            "sweep_id": text(str(run.sweep_id)) if run.sweep_id else None,
            "repeat": run.repeat if isinstance(run.repeat, int) else None,
            "processes": run.processes, "unit": text(str(run.unit)),
            "per_gpu": _number(run.per_gpu), "node_throughput": _number(run.node),
            "mean_power_w": _number(run.mean_power_w),
            "units_per_joule_with_overhead": _number(run.units_per_joule_with_overhead),
            "problems": text("; ".join(run.problems)), "run": blob}


def _number(value):
    import math

    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _key(path: Path) -> str:
    return shown_path(path)


# ---- indexing ---------------------------------------------------------------------------
@dataclasses.dataclass
class Indexed:
    runs: list
    sweeps: list
    read: int  # files read this time (new or changed)
    reused: int  # files whose stored reduction was reused
    note: str


PARALLEL_FROM = 2000  # new files from which reading is spread over the CPU cores


def index(kit: Kit, paths: list[str | Path], allow_empty: bool = False, con=None) -> Indexed:
    """Every result under paths as a Run, from the index where the file is unchanged;
    copies (same run id and content) marked duplicates. The index is updated."""
    from hpcai.launcher.report.ingest import unreadable

    found = walk(paths, allow_empty)
    own = con is None
    con, note = open_index(kit, found.roots) if own else (con, "")
    try:
        known = {row[0]: row[1:] for row in con.execute(
            "SELECT path, size, mtime_ns, ino, sha256 FROM files").fetchall()}
        runs: list = []
        unchanged: dict[str, int] = {}  # key -> position in runs
        todo = []  # [position, path, stat, (stored sha256, stored run) or None]: new or changed
        for path, st in found.results:
            key = _key(path)
            old = known.get(key)
            if old and old[:3] == (st.st_size, st.st_mtime_ns, st.st_ino):
                unchanged[key] = len(runs)
            else:
                todo.append([len(runs), path, st, old])
            runs.append(None)
        _stored_runs(kit, con, runs, unchanged, {_key(t[1]): t for t in todo if t[3]})
        fresh = []
        for (position, path, st, _), (run, blob) in zip(todo, _read_all(kit, todo)):
            runs[position] = run
            fresh.append(_row(_key(path), st, run, blob))
        _store(con, fresh, found, {_key(p) for p, _ in found.results}, known)
        runs += [unreadable(kit, p, "a symbolic link: not followed") for p in found.links]
        mark_duplicates(runs)
        return Indexed(runs, _sweeps(kit, found.sweeps), len(todo), len(found.results) - len(todo), note)
    finally:
        if own:
            con.close()


def _stored_runs(kit: Kit, con, runs: list, unchanged: dict, touched: dict) -> None:
    """Runs of unchanged files from their stored form, streamed in batches (100,000
    stored forms at once would be a quarter of a gigabyte of text); for touched
    files, the stored hash and form, to reuse if their bytes are the same."""
    cursor = con.execute("SELECT path, sha256, run FROM files")
    while batch := cursor.fetchmany(5000):
        for key, digest, blob in batch:
            position = unchanged.get(key)
            if position is not None:
                runs[position] = from_blob(kit, blob)
            elif key in touched:
                touched[key][3] = (digest, blob)


def _read_all(kit: Kit, todo: list) -> list[tuple]:
    """(Run, stored form) of each new or changed file, on every core when there are many."""
    items = [(path, old) for _, path, _, old in todo]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if len(items) < PARALLEL_FROM or cores < 2:
        return _read_chunk(kit, items)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = max(200, len(items) // (cores * 8))
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    # fork: the workers start with the modules already imported (Linux, where hpcai runs).
    with ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("fork")) as pool:
        return [pair for part in pool.map(_read_chunk, [kit] * len(chunks), chunks) for pair in part]


def _read_chunk(kit: Kit, items: list) -> list[tuple]:
    from hpcai.launcher.report.ingest import content_hash, ingest_bytes, read_bytes, BadJSON, ingest

    out = []
    for path, old in items:
        if old:  # touched: the same bytes need no new reduction
            try:
                data = read_bytes(path)
            except (OSError, BadJSON):
                data = None
            if data is not None and content_hash(data) == old[0]:
                run = from_blob(kit, old[1])
                run.path = path
                out.append((run, old[1]))
                continue
            run = ingest_bytes(kit, path, data) if data is not None else ingest(kit, path)
        else:
            run = ingest(kit, path)
        out.append((run, to_blob(run)))
    return out


def _store(con, fresh: list[dict], found: Found, seen: set[str], known: dict) -> None:
    """New and changed rows in, rows of files gone from under the roots out."""
    prefixes = tuple(_key(r) + os.sep for r in found.roots if r.is_dir())
    gone = [k for k in known if k not in seen and k.startswith(prefixes)]
    replaced = [row["path"] for row in fresh if row["path"] in known] + gone
    if replaced:
        con.execute("CREATE OR REPLACE TEMP TABLE drop_paths (path VARCHAR)")
        con.executemany("INSERT INTO drop_paths VALUES (?)", [(p,) for p in replaced])
        con.execute("DELETE FROM files WHERE path IN (SELECT path FROM drop_paths)")
    if not fresh:
        return
    # One statement through DuckDB's JSON reader: row-by-row inserts cost ~100x more.
    with tempfile.NamedTemporaryFile("w", suffix=".ndjson", encoding="ascii", delete=False) as fh:
        for row in fresh:
            fh.write(json.dumps(row, ensure_ascii=True, allow_nan=False) + "\n")
    try:
        columns = ", ".join(f"'{n}': '{t}'" for n, t in COLUMNS.items())
        con.execute(f"INSERT INTO files SELECT * FROM read_json(?, format = 'newline_delimited', "
                    f"columns = {{{columns}}}, maximum_object_size = 1073741824)", [fh.name])
    finally:
        os.unlink(fh.name)


def mark_duplicates(runs: list) -> None:
    """The second and later files with one run id and one content: duplicates."""
    first: dict = {}
    for run in sorted(runs, key=lambda r: os.fsencode(r.path)):
        if not run.content_hash:
            continue
        identity = (run.run_id, run.content_hash)
        kept = first.setdefault(identity, run)
        if kept is not run:
            run.duplicate_of = shown_path(kept.path)
            run.status = "duplicate"
            run.problems = [f"a copy of {shown_path(kept.path)} (same run id and content): "
                            "counted once"]


def _sweeps(kit: Kit, paths: list[Path]) -> list:
    from hpcai.launcher.report.ingest import BadJSON, parse, read_bytes

    sweeps = []
    for path in paths:
        try:
            doc, _ = parse(read_bytes(path))
        except (OSError, BadJSON):
            continue
        if isinstance(doc, dict):
            sweeps.append(kit.Sweep(path, doc))
    return sweeps
