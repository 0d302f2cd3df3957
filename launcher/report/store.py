"""The results store: an index of result files in DuckDB, so a report (or
`hpcai-launch results`) over a folder it has seen re-reads only new or changed
files.

Why DuckDB: an embedded, columnar SQL engine in one pip wheel (no server),
whose C++ reader loads a batch of new rows from newline-delimited JSON in one
statement and writes CSV and zstd Parquet for `results export`; queries over
100,000 rows (filters, duplicates) are SQL, not Python loops.

Each file is keyed by its path, size, mtime, inode and ctime (which utime
cannot set back: a file edited in place with its size, mtime and inode kept
still changes it); a key that still
matches reuses the stored reduction of the file (the report's Run, one column
per field: report/run_columns.py) without reading it; a changed key re-reads
the file and compares its sha256, so a touched but unchanged file is not
parsed again. New files are read on every core; each worker writes its rows
as newline-delimited JSON that DuckDB loads in one statement, and every Run,
cold or warm, is then built from the index's columns in batches, so a cold
and a warm report see the same Runs. The folders are walked in a forked child
(report/forked.py) while the stored Runs under them are built here; after the
walk, only the rows of new or changed files are built again. The index is a
cache: deleting
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
import tempfile
from pathlib import Path
from typing import NamedTuple

from hpcai.errors import UsageError
from hpcai.launcher.bundles.files import ENVELOPE_FILE
from hpcai.launcher.report.ingest import Kit, shown_path
from hpcai.install import install_hint


INDEX_ENV = "HPCAI_RESULTS_INDEX"
# Bump when what is stored per file changes (Run's fields, the reduction in load.py).
INDEX_FORMAT = 5
# The file's key (size, mtime, inode, ctime: unchanged, the row is reused) and
# whether the run is usable; every other column is a field of the Run (run_columns.py),
# each held once: `results ls/show/export` and a user's own SQL read those.
COLUMNS = {"path": "VARCHAR", "size": "BIGINT", "mtime_ns": "BIGINT", "ino": "BIGINT",
           "ctime_ns": "BIGINT", "usable": "BOOLEAN"}


# ---- finding files --------------------------------------------------------------------
@dataclasses.dataclass
class Found:
    results: list[tuple[str, tuple[int, int, int, int]]]  # (path, (size, mtime_ns, inode, ctime_ns))
    sweeps: list[Path]
    links: list[Path]  # result.json that are symbolic links: listed, never followed
    roots: list[Path]
    envelopes: list[Path] = dataclasses.field(default_factory=list)  # folders of signed bundles


def roots(paths: list[str | Path]) -> list[Path]:
    """The files and folders given, resolved (they are the user's choice)."""
    resolved = []
    for given in paths:
        path = Path(given)
        if not path.exists() and not path.is_symlink():
            raise UsageError(f"{shown_path(path)} does not exist", "give result files or folders")
        resolved.append(path.resolve())
    return resolved


class FileKey(NamedTuple):
    """What the index keys a file by, from its stat (new and changed files carry one)."""

    st_size: int
    st_mtime_ns: int
    st_ino: int
    st_ctime_ns: int


def walk(paths: list[str | Path], allow_empty: bool = False) -> Found:
    """result.json and sweep.json under the given files and folders. The folders
    given are the user's choice (resolved); below them no symbolic link is followed.
    Results as (path as text, (size, mtime_ns, inode, ctime_ns)): plain tuples, which a forked
    walk sends back at C speed (a named tuple is rebuilt by a call per result)."""
    found = Found([], [], [], [])
    for path in roots(paths):
        found.roots.append(path)
        if path.is_dir():
            _walk_dir(path, found)
        elif path.name == "sweep.json":
            found.sweeps.append(path)
        else:
            found.results.append((os.fspath(path), _file_key(path.stat())))
    if len(found.roots) > 1:  # a folder given twice, or one inside another
        found.results = list(dict(found.results).items())
    # In Path order (by their parts): the separator read as the lowest character
    # compares texts as their parts would be compared, with no list per path.
    found.results.sort(key=lambda item: item[0].replace(os.sep, "\0"))
    found.sweeps = sorted(set(found.sweeps))
    found.envelopes = sorted(set(found.envelopes))
    if not found.results and not found.links and not allow_empty:
        raise UsageError(f"no result.json under {', '.join(shown_path(p) for p in paths)}",
                         "give result files, run folders, sweep folders or a results folder")
    return found


def _file_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


def _walk_dir(top: Path, found: Found) -> None:
    """Adds what is under top to found (results as walk() gives them, in no order)."""
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
                    found.results.append((entry.path, _file_key(entry.stat(follow_symlinks=False))))
            elif entry.name == "sweep.json" and entry.is_file(follow_symlinks=False):
                found.sweeps.append(Path(entry.path))
            elif entry.name == ENVELOPE_FILE and entry.is_file(follow_symlinks=False):
                found.envelopes.append(Path(folder))


# ---- the index database ---------------------------------------------------------------
def index_location(roots: list[Path]) -> Path:
    given = os.environ.get(INDEX_ENV)
    if given:
        return Path(given)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256("\0".join(sorted(os.fsencode(r).hex() for r in roots)).encode()).hexdigest()
    return base / "hpcai" / "results-index" / f"{key[:24]}.duckdb"


def _safe_location(db: Path) -> str | None:
    """Why db must not be used (None: it may). Its folder is made private and must
    be ours and writable by no one else; an existing file must be a regular file of
    ours, reached without a link. One of ours that others could write is removed
    (a cache: it is built again), since its numbers may be anyone's."""
    from hpcai.ownership import stat_problem

    ours = {os.geteuid()}
    try:
        db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = stat_problem(os.lstat(db.parent), shown_path(db.parent), owners=ours, kind="folder")
        if why:
            return why
        for path in (db, Path(f"{db}.wal")):
            if os.path.lexists(path):
                info = os.lstat(path)
                why = stat_problem(info, shown_path(path), owners=ours, kind="file", forbidden=0)
                if why:
                    return why
                if stat_problem(info, path, owners=ours):
                    os.unlink(path)
    except OSError as exc:
        return f"{shown_path(db)}: {exc.strerror}"
    return None


def open_index(kit: Kit, roots: list[Path]):
    """(DuckDB connection, note): the cached index, or one in memory with why."""
    try:
        import duckdb
    except ImportError:
        raise UsageError("the results store needs DuckDB, which is not installed",
                         install_hint('report')) from None

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
                + ", ".join(f'"{n}" {t}' for n, t in all_columns(kit).items()) + ")")


def all_columns(kit: Kit) -> dict[str, str]:
    from hpcai.launcher.report.run_columns import columns

    return {**COLUMNS, **columns(kit.Run)}


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
def _row(key: str, st: os.stat_result, run, fields: list) -> dict:
    from hpcai.launcher.report.run_columns import encode

    return {"path": key, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino,
            "ctime_ns": st.st_ctime_ns, "usable": run.usable, **encode(run, fields, key)}


def _key(path: Path) -> str:
    text = os.fspath(path)
    return text if text.isascii() else shown_path(path)  # ASCII: the same text, 10x sooner


# ---- indexing ---------------------------------------------------------------------------
@dataclasses.dataclass
class Indexed:
    runs: list
    sweeps: list
    read: int  # files read this time (new or changed)
    reused: int  # files whose stored reduction was reused
    note: str
    found: Found | None = None  # the walk: its bundles' envelopes, for report/origins.py


PARALLEL_FROM = 2000  # new files from which reading is spread over the CPU cores


def index(kit: Kit, paths: list[str | Path], allow_empty: bool = False, con=None) -> Indexed:
    """Every result under paths as a Run, from the index where the file is unchanged;
    copies (same run id and content) marked duplicates. The index is updated. The
    folders are walked in a forked child (report/forked.py) while the index is read."""
    import gc

    # Millions of new objects, none of them cyclic: the cycle collector would walk all
    # of them again and again while they are made (a third of the time at 100,000).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _index(kit, paths, allow_empty, con)
    finally:
        if collecting:
            gc.enable()


def _index(kit: Kit, paths: list, allow_empty: bool, con) -> Indexed:
    from hpcai.launcher.report.forked import ForkedCall
    from hpcai.launcher.report.ingest import unreadable

    walking = ForkedCall(walk, paths, allow_empty)
    own = con is None
    try:
        given = roots(paths)
        con, note = open_index(kit, given) if own else (con, "")
        # While the folders are walked: every stored file under them, by key: its
        # (size, mtime_ns, ino, ctime_ns, sha256) and its Run.
        known, stored = _stored_under(kit, con, given)
        # Paths stay text (a fleet's 100,000 Path objects cost a fifth of a second):
        # the stored Runs have theirs; only new and changed files need one.
        found = walking.result()
        position: dict[str, int] = {}  # key -> place in the runs, in the walk's order
        todo = []  # (path, stat, stored sha256 or None): new or changed files
        for path, st in found.results:
            key = _key(path)
            position[key] = len(position)
            old = known.get(key)
            if not (old and old[:4] == st):
                todo.append((Path(path), FileKey(*st), old[4] if old else None))  # the stored sha256
        seen = set(position)
        _store(con, kit, todo, found, seen, known)
        paths_found = [path for path, _ in found.results]
        if len(todo) > len(position) // 2:
            runs = _stored_runs(kit, con, position, paths_found)
        else:
            runs = _reused_runs(kit, con, stored, position, todo, paths_found)
        mark_copies(con, given, runs, position)
        runs += [unreadable(kit, p, "a symbolic link: not followed") for p in found.links]
        return Indexed(runs, _sweeps(kit, found.sweeps), len(todo), len(found.results) - len(todo),
                       note, found)
    finally:
        walking.close()
        if own and con is not None:
            con.close()


BATCH = 5000  # rows turned into Runs at once: the text of 100,000 rows at once is ~0.3 GB


def column_batches(con, select: str, where: str = "true", params: tuple = ()):
    """The files table's rows that match where, BATCH at a time (by row id), each batch
    as its columns: lists of Python values in select's order. A column is fetched as
    one array and converted in one call (a tuple per row costs twice the time)."""
    (top,) = con.execute("SELECT max(rowid) FROM files").fetchone()
    for low in range(0, -1 if top is None else top + 1, BATCH):
        arrays = con.execute(f"SELECT {select} FROM files WHERE ({where}) AND rowid >= ? "
                             "AND rowid < ?", [*params, low, low + BATCH]).fetchnumpy()
        columns = [array.tolist() for array in arrays.values()]  # a NULL (masked) is None
        if columns and columns[0]:
            yield columns


def _stored_runs(kit: Kit, con, position: dict[str, int], paths: list[Path],
                 only: set[str] | None = None) -> list:
    """The Runs of the files found (paths, in the walk's order), from their columns;
    only: just these keys' rows (a few changed files), placed where position says."""
    from hpcai.launcher.report.run_columns import Decoder, layout, select_list

    fields = layout(kit.Run)
    decoder = Decoder(kit.Run, fields)
    runs: list = [None] * len(paths)
    where = "true"
    if only is not None:
        con.execute("CREATE OR REPLACE TEMP TABLE wanted_paths (path VARCHAR)")
        con.executemany("INSERT INTO wanted_paths VALUES (?)", [(k,) for k in only])
        where = "path IN (SELECT path FROM wanted_paths)"
    for keys, *columns in column_batches(con, f"path, {select_list(fields)}", where):
        places = [position.get(key) for key in keys]
        if None in places:  # rows of files not found this time: not made into Runs
            kept = [i for i, place in enumerate(places) if place is not None]
            columns = [[column[i] for i in kept] for column in columns]
            places = [places[i] for i in kept]
        for place, run in zip(places, decoder.runs(columns, [paths[p] for p in places])):
            runs[place] = run
    return runs


def under_clause(roots: list[Path]) -> tuple[str, list]:
    """A WHERE clause and its parameters: the rows of files under roots."""
    clauses, params = [], []
    for root in roots:
        clauses.append("starts_with(path, ?) OR path = ?")
        params += [_key(root).rstrip(os.sep) + os.sep, _key(root)]  # "/" is "/", not "//"
    return "(" + " OR ".join(clauses) + ")", params


def _stored_under(kit: Kit, con, under: list[Path]) -> tuple[dict[str, tuple], dict[str, object]]:
    """Every stored file under the roots, by key: its (size, mtime_ns, ino, ctime_ns, sha256), and
    its Run (each file's path from its own column)."""
    from hpcai.launcher.report.run_columns import Decoder, layout, select_list

    fields = layout(kit.Run)
    decoder = Decoder(kit.Run, fields)
    where, params = under_clause(under)
    known, stored = {}, {}
    select = f"path, size, mtime_ns, ino, ctime_ns, content_hash, {select_list(fields)}"
    for keys, size, mtime, ino, ctime, sha256, *columns in column_batches(con, select, where, params):
        known.update(zip(keys, zip(size, mtime, ino, ctime, sha256)))
        stored.update(zip(keys, decoder.runs(columns)))
    return known, stored


def _reused_runs(kit: Kit, con, stored: dict, position: dict[str, int], todo: list,
                 paths: list) -> list:
    """The Runs of the files found: stored ones where unchanged, the rows just written
    for new and changed files."""
    fresh = {_key(path) for path, _, _ in todo}
    fresh.update(key for key in position if key not in stored)  # stored, but not found under a root
    wanted = {position[key] for key in fresh}
    runs: list = [None] * len(position)
    for key, place in position.items():
        if key not in fresh:
            runs[place] = stored[key]
    if fresh:
        new = _stored_runs(kit, con, {k: position[k] for k in fresh},
                           [p if place in wanted else None for place, p in enumerate(paths)],
                           only=fresh)
        for key in fresh:
            runs[position[key]] = new[position[key]]
    return runs


def _read_all(kit: Kit, todo: list, folder: str) -> list[tuple]:
    """Each new or changed file read into newline-delimited JSON files under folder, on
    every core when there are many: [(ndjson path, [(key, st) of touched but unchanged
    files])]. Only file names cross between processes, never Runs."""
    items = todo
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if len(items) < PARALLEL_FROM or cores < 2:
        return [_read_chunk(kit, items, os.path.join(folder, "0.ndjson"))]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = max(200, len(items) // (cores * 8))
    chunks = [items[i:i + size] for i in range(0, len(items), size)]
    names = [os.path.join(folder, f"{n}.ndjson") for n in range(len(chunks))]
    # fork: the workers start with the modules already imported (Linux, where hpcai runs).
    with ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(_read_chunk, [kit] * len(chunks), chunks, names))


def _read_chunk(kit: Kit, items: list, out: str) -> tuple[str, list]:
    from hpcai.launcher.report.ingest import BadJSON, content_hash, ingest, ingest_bytes, read_bytes
    from hpcai.launcher.report.run_columns import layout

    fields = layout(kit.Run)
    same = []
    with open(out, "w", encoding="ascii") as fh:
        for path, st, old in items:
            if old:  # touched: the same bytes need no new reduction
                try:
                    data = read_bytes(path)
                except (OSError, BadJSON):
                    data = None
                if data is not None and content_hash(data) == old:
                    same.append((_key(path), st))
                    continue
                run = ingest_bytes(kit, path, data) if data is not None else ingest(kit, path)
            else:
                run = ingest(kit, path)
            row = _row(_key(path), st, run, fields)
            fh.write(json.dumps(row, ensure_ascii=True, allow_nan=False) + "\n")
    return out, same


def _store(con, kit: Kit, todo: list, found: Found, seen: set[str], known: dict) -> None:
    """New and changed rows in, rows of files gone from under the roots out."""
    prefixes = tuple(_key(r) + os.sep for r in found.roots if r.is_dir())
    gone = [k for k in known if k not in seen and k.startswith(prefixes)]
    if not todo and not gone:
        return
    with tempfile.TemporaryDirectory(prefix="hpcai-index-") as folder:
        parts = _read_all(kit, todo, folder) if todo else []
        same = {key: st for _, touched in parts for key, st in touched}
        replaced = [key for key in map(_key, (path for path, _, _ in todo))
                    if key in known and key not in same] + gone
        if replaced:
            con.execute("CREATE OR REPLACE TEMP TABLE drop_paths (path VARCHAR)")
            con.executemany("INSERT INTO drop_paths VALUES (?)", [(p,) for p in replaced])
            con.execute("DELETE FROM files WHERE path IN (SELECT path FROM drop_paths)")
        if same:  # the same bytes under a new mtime or inode: only the key changes
            con.executemany("UPDATE files SET size = ?, mtime_ns = ?, ino = ?, ctime_ns = ? WHERE path = ?",
                            [(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, key)
                             for key, st in same.items()])
        files = [name for name, _ in parts if os.path.getsize(name)]
        if files:
            # One statement through DuckDB's JSON reader: row-by-row inserts cost ~100x more.
            columns = ", ".join(f"'{n}': '{t}'" for n, t in all_columns(kit).items())
            con.execute(f"INSERT INTO files SELECT * FROM read_json(?, format = 'newline_delimited', "
                        f"columns = {{{columns}}}, maximum_object_size = 1073741824)", [files])


# One rule for copies, the report's and `results ls/show/export`'s: of the files with one
# run id and one content, the first by path is counted and the others are its copies; a
# file with no content read (unreadable) is nobody's copy. SELECT {COPIES} FROM files
# WHERE ... {SAME_RUN}.
COPIES = ("CASE WHEN content_hash <> '' THEN row_number() OVER same_run ELSE 1 END AS copy, "
          "first_value(path) OVER same_run AS first_path")
SAME_RUN = "WINDOW same_run AS (PARTITION BY run_id, content_hash ORDER BY path)"


def mark_copies(con, roots: list[Path], runs: list, position: dict[str, int]) -> None:
    """The runs that are copies (COPIES, over the indexed files under roots) marked as
    duplicates of the first."""
    where, params = under_clause(roots)
    copies = con.execute(f"SELECT path, first_path FROM (SELECT path, {COPIES} FROM files "
                         f"WHERE {where} {SAME_RUN}) WHERE copy > 1", params).fetchall()
    for key, first in copies:
        place = position.get(key)
        if place is None:
            continue
        run, kept = runs[place], shown_path(first)
        run.duplicate_of, run.status = kept, "duplicate"
        run.problems = [f"a copy of {kept} (same run id and content): counted once"]


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
