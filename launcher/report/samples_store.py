"""A run's samples.csv (the telemetry sidecar) for the report's power plot:
read only when the plot needs it, and then kept as zstd-compressed Parquet
beside the results index, so the next report reads the compressed copy.

The copy is named by the result's content hash and the CSV's size, mtime and
inode: a changed CSV is read again, never shadowed by an old copy. Columns are
stored as text exactly as the CSV holds them, so the series read back is the
same, number for number, as the one parsed from the CSV. The cache folder is
the results index's (private, ours, never through a link: store.py checks
it); where it cannot be used, the CSV is read each time, as before.
"""
from __future__ import annotations

import csv
import hashlib
import io
import os
from pathlib import Path

Series = dict[str, list[tuple[float, float]]]


def cache_folder() -> Path | None:
    """samples/ beside the results index, made private; None where it is not safe."""
    from hpcai.launcher.report.store import INDEX_ENV, _safe_location, index_location

    given = os.environ.get(INDEX_ENV)
    db = Path(given) if given else index_location([])
    folder = db.parent / "samples"
    if _safe_location(folder / "x.parquet") is not None:
        return None
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return None
    from hpcai.ownership import stat_problem

    return None if stat_problem(info, folder, owners={os.geteuid()}, kind="folder") else folder


def power_series(run) -> Series:
    """source -> [(t, power_w)] from the run's samples, compressed copy first."""
    from hpcai.errors import HpcaiError
    from hpcai.launcher.bundles.files import read_regular

    if run.samples_path is None:
        return {}
    folder = cache_folder()
    try:
        info = os.lstat(run.samples_path)
    except OSError:
        return {}
    copy = folder / _name(run, info) if folder else None
    if copy is not None and copy.is_file() and not copy.is_symlink():
        return _parse(_from_parquet(copy))
    try:
        data = read_regular(run.samples_path, "samples")
    except HpcaiError:
        return {}
    rows = list(csv.reader(io.StringIO(data.decode("utf-8", "replace"), newline="")))
    if copy is not None:
        _to_parquet(data, copy)
    return _parse(rows)


def _name(run, info: os.stat_result) -> str:
    # ctime too: utime cannot set it back, so a CSV edited in place is read again.
    key = f"{run.content_hash}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ino}\0{info.st_ctime_ns}"
    return hashlib.sha256(key.encode()).hexdigest()[:32] + ".parquet"


def _parse(rows: list[list[str]]) -> Series:
    """As csv.DictReader over the file: the header row names the columns."""
    if not rows:
        return {}
    header, series = rows[0], {}
    for values in rows[1:]:
        row = dict(zip(header, values))
        if row.get("power_w"):
            series.setdefault(row["source"], []).append((float(row["t"]), float(row["power_w"])))
    return series


def _from_parquet(path: Path) -> list[list[str]]:
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        cursor = con.execute("SELECT * FROM read_parquet(?)", [str(path)])
        header = [d[0] for d in cursor.description]
        return [header] + [["" if v is None else v for v in row] for row in cursor.fetchall()]
    finally:
        con.close()


def _to_parquet(data: bytes, copy: Path) -> None:
    """The CSV's text as zstd Parquet (all columns text: nothing re-rounded), written by
    DuckDB in a private folder beside the copy and renamed over it (hpcai/safe_files.py
    written_by_a_tool), so a reader never sees half a file."""
    import duckdb

    from hpcai.safe_files import written_by_a_tool

    try:
        with written_by_a_tool(copy) as temp:
            csv_path = temp.with_name(f"{temp.name}.csv")  # in the same private folder
            try:
                csv_path.write_bytes(data)
                _csv_to_parquet(duckdb, csv_path, temp)
            finally:
                csv_path.unlink(missing_ok=True)
    except (duckdb.Error, OSError):
        pass  # a cache: the CSV is read again next time


def _csv_to_parquet(duckdb, csv_path: Path, target: Path) -> None:
    con = duckdb.connect(":memory:")
    try:
        quoted = str(target).replace("'", "''")
        con.execute("COPY (SELECT * FROM read_csv(?, header = true, all_varchar = true, "
                    "delim = ',', quote = '\"', escape = '\"')) "
                    f"TO '{quoted}' (FORMAT parquet, COMPRESSION zstd)", [str(csv_path)])
    finally:
        con.close()
