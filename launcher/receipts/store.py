"""Receipts in the results store: two DuckDB tables beside the results index's
`files` (launcher/report/store.py), filled from the spool by one read_json per
batch of new files, queried in SQL (`hpcai-launch results jobs`).

    receipts      one row per job and node (file: the receipt's name in the spool)
    receipt_gpus  one row per GPU of it (joined on file)

Column types are in RECEIPT_COLUMNS and GPU_COLUMNS; docs/how-to/job-receipts.md
shows them to plain-DuckDB users. The store keeps a receipt once ingested, also
after the spool's file is pruned: it is the lasting record, the spool only the
buffer that holds receipts while the store is not reachable. A start file
(the prolog's half of a job still running, or of one whose epilog never ran: a
failed node) is ingested as state "open" and replaced by the complete receipt.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.launcher.receipts import spool as spool_files
from hpcai.ownership import stat_problem

RECEIPT_COLUMNS = {
    "file": "VARCHAR", "job_id": "VARCHAR", "restarts": "INTEGER", "node": "VARCHAR", "host": "VARCHAR",
    "user": "VARCHAR", "uid": "BIGINT", "account": "VARCHAR", "partition": "VARCHAR", "job_name": "VARCHAR",
    "qos": "VARCHAR", "state": "VARCHAR", "slurm_state": "VARCHAR", "exit_code": "VARCHAR",
    "gpu_count": "INTEGER", "start": "TIMESTAMP", "end": "TIMESTAMP", "duration_s": "DOUBLE",
    "gpu_hours": "DOUBLE", "gpu_energy_j": "DOUBLE", "node_energy_j": "DOUBLE",
    "node_energy_method": "VARCHAR", "node_source": "VARCHAR", "lost_gpus": "VARCHAR", "problems": "VARCHAR",
    # The node's measurement tier (launcher/tier.py): last, so that a store made before them gains them.
    "tier": "VARCHAR", "tier_agreement_frac": "DOUBLE", "tier_stated_frac": "DOUBLE", "tier_meter_api": "VARCHAR",
    "tier_calibrated": "VARCHAR", "tier_reason": "VARCHAR",
}
GPU_COLUMNS = {
    "file": "VARCHAR", "uuid": "VARCHAR", "gpu_index": "INTEGER", "model": "VARCHAR", "model_full": "VARCHAR",
    "lost": "BOOLEAN", "energy_j": "DOUBLE", "energy_method": "VARCHAR", "energy_start_j": "DOUBLE",
    "energy_end_j": "DOUBLE", "power_start_w": "DOUBLE", "power_end_w": "DOUBLE", "cap_w": "DOUBLE",
    "cap_start_w": "DOUBLE", "default_cap_w": "DOUBLE", "cap_set_by": "VARCHAR",
    "sm_clock_mhz": "DOUBLE", "memory_clock_mhz": "DOUBLE", "clocks_set_by": "VARCHAR",
}
# The receipt's JSON fields, as read_json reads them (the gpus list keeps its own names).
_JSON_GPU = ("STRUCT(uuid VARCHAR, \"index\" INTEGER, model VARCHAR, model_full VARCHAR, lost BOOLEAN, "
             "energy_j DOUBLE, energy_method VARCHAR, energy_start_j DOUBLE, energy_end_j DOUBLE, "
             "power_start_w DOUBLE, power_end_w DOUBLE, cap_w DOUBLE, cap_start_w DOUBLE, "
             "default_cap_w DOUBLE, cap_set_by VARCHAR, sm_clock_mhz DOUBLE, memory_clock_mhz DOUBLE, "
             "clocks_set_by VARCHAR)[]")
_JSON = {"job_id": "VARCHAR", "restarts": "INTEGER", "node": "VARCHAR", "host": "VARCHAR", "user": "VARCHAR",
         "uid": "BIGINT", "account": "VARCHAR", "partition": "VARCHAR", "job_name": "VARCHAR", "qos": "VARCHAR",
         "state": "VARCHAR", "slurm_state": "VARCHAR", "exit_code": "VARCHAR", "start": "VARCHAR",
         "end": "VARCHAR", "duration_s": "DOUBLE", "node_energy_j": "DOUBLE", "node_energy_method": "VARCHAR",
         "node_source": "VARCHAR", "lost_gpus": "VARCHAR[]", "problems": "VARCHAR[]", "gpus": _JSON_GPU,
         "tier": "STRUCT(tier VARCHAR, agreement_within_frac DOUBLE, stated_agreement_frac DOUBLE, "
                 "meter_api VARCHAR, calibrated VARCHAR, reason VARCHAR)"}


def create_tables(con) -> None:
    for table, columns in (("receipts", RECEIPT_COLUMNS), ("receipt_gpus", GPU_COLUMNS)):
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                    + ", ".join(f'"{n}" {t}' for n, t in columns.items()) + ")")
        for name, kind in columns.items():  # a store made by an older hpcai gains the newer columns
            con.execute(f'ALTER TABLE {table} ADD COLUMN IF NOT EXISTS "{name}" {kind}')
    con.execute("CREATE TABLE IF NOT EXISTS receipt_files (file VARCHAR, size BIGINT, mtime_ns BIGINT)")


def open_store(spool: Path, store: str | None):
    """A connection to the store at `store`, else at the results index's place for
    this spool (launcher/report/store.py), refused there if it is a link or not ours."""
    from hpcai.install import install_hint

    try:
        import duckdb
    except ImportError:
        raise UsageError("the results store needs DuckDB, which is not installed",
                         install_hint("report")) from None
    from hpcai.launcher.report.store import _safe_location, index_location

    db = Path(store) if store else index_location([spool.absolute()])
    why = _safe_location(db)
    if why:
        raise UsageError(f"cannot use the receipts store: {why}", "give --store a file of yours")
    try:
        con = duckdb.connect(str(db))
    except duckdb.Error as exc:
        raise UsageError(f"cannot open the receipts store {db}: {' '.join(str(exc).split())[:200]}",
                         "another command may hold it; try again when it ends") from None
    create_tables(con)
    return con


def list_spool(spool: Path) -> tuple[list[tuple[str, int, int]], int]:
    """((name, size, mtime_ns) of each receipt in the spool that this user (or root)
    wrote and no one else can write, how many others were left out); the spool itself
    checked as the writer checks it."""
    with spool_files.open_spool(spool, create=False) as folder:
        found, untrusted = [], 0
        for entry in os.scandir(folder.fd):
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            st = entry.stat(follow_symlinks=False)
            if stat_problem(st, entry.name, kind="file") is None:
                found.append((entry.name, st.st_size, st.st_mtime_ns))
            else:
                untrusted += 1
    return found, untrusted


def ingest(con, spool: Path) -> tuple[int, list[str]]:
    """Bring the store up to date with the spool: (files read, notes on what was left out)."""
    listing, untrusted = list_spool(spool)
    con.execute("CREATE OR REPLACE TEMP TABLE listing (file VARCHAR, size BIGINT, mtime_ns BIGINT)")
    _insert_rows(con, "listing", listing)
    # Open (start-file) rows go whenever their file does; a changed file is read again.
    con.execute("""CREATE OR REPLACE TEMP TABLE stale AS
        SELECT file FROM receipt_files EXCEPT SELECT file FROM
        (SELECT file, size, mtime_ns FROM receipt_files INTERSECT SELECT * FROM listing)""")
    con.execute("""DELETE FROM stale WHERE file NOT LIKE '%.start.json'
                   AND file NOT IN (SELECT file FROM listing)""")  # pruned from the spool: kept
    for table in ("receipts", "receipt_gpus", "receipt_files"):
        con.execute(f"DELETE FROM {table} WHERE file IN (SELECT file FROM stale)")
    new = [r[0] for r in con.execute("SELECT file FROM listing WHERE file NOT IN "
                                     "(SELECT file FROM receipt_files) ORDER BY file").fetchall()]
    unreadable = 0
    for batch in range(0, len(new), 20000):
        unreadable += _read_batch(con, spool, new[batch:batch + 20000])
    notes = [f"{untrusted} file(s) in {spool} left out: links, or not written by root (or you)"] if untrusted else []
    if unreadable:
        notes.append(f"{unreadable} file(s) in {spool} are not receipts (not JSON, or no job id): left out")
    return len(new), notes


def _read_batch(con, spool: Path, names: list[str]) -> int:
    """The receipts of these files into the tables; returns how many were not receipts.
    Each receipt is one line of JSON: the lines, each given its file's name, are joined
    into one temporary file that DuckDB reads in one go (a read_json over thousands of
    small files costs about 10 ms and a buffer per file)."""
    fd, joined = tempfile.mkstemp(suffix=".jsonl")  # 0600, in this user's temporary folder
    try:
        with os.fdopen(fd, "wb") as out:
            read = _join_lines(spool, names, out)
        columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in {"file": "VARCHAR", **_JSON}.items()) + "}"
        con.execute(f"""CREATE OR REPLACE TEMP TABLE batch AS SELECT * FROM read_json(?,
            format='newline_delimited', columns={columns}, ignore_errors=true)""", [joined])
    finally:
        os.unlink(joined)
    con.execute("""INSERT INTO receipts SELECT file, job_id, restarts, node, host, "user", uid, account,
        partition, job_name, qos, CASE WHEN file LIKE '%.start.json' THEN 'open' ELSE state END,
        slurm_state, exit_code, len(gpus), TRY_CAST(start AS TIMESTAMP), TRY_CAST("end" AS TIMESTAMP),
        duration_s, len(gpus) * duration_s / 3600.0,
        list_sum([g.energy_j FOR g IN gpus]), node_energy_j, node_energy_method, node_source,
        array_to_string(lost_gpus, ','), array_to_string(problems, '; '),
        tier.tier, tier.agreement_within_frac, tier.stated_agreement_frac, tier.meter_api, tier.calibrated,
        tier.reason
        FROM batch WHERE job_id IS NOT NULL""")
    con.execute("""INSERT INTO receipt_gpus SELECT file, g.uuid, g."index", g.model, g.model_full,
        coalesce(g.lost, false), g.energy_j, g.energy_method, g.energy_start_j, g.energy_end_j,
        g.power_start_w, g.power_end_w, g.cap_w, g.cap_start_w, g.default_cap_w, g.cap_set_by,
        g.sm_clock_mhz, g.memory_clock_mhz, g.clocks_set_by
        FROM (SELECT file, unnest(gpus) AS g FROM batch WHERE job_id IS NOT NULL
              AND file NOT LIKE '%.start.json')""")
    _insert_rows(con, "receipt_files", read)
    return len(names) - con.execute("SELECT count(*) FROM batch WHERE job_id IS NOT NULL").fetchone()[0]


def _join_lines(spool: Path, names: list[str], out) -> list[tuple[str, int, int]]:
    """Each file's one JSON line to out with "file" (its name) first; (name, size, mtime_ns)
    of each file read. A file that is not one line of a JSON object is left out here
    (read_json would take each of its lines for a receipt)."""
    read = []
    for name in names:
        try:
            fd = os.open(spool / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as fh:
            st, data = os.fstat(fh.fileno()), fh.read()
        read.append((name, st.st_size, st.st_mtime_ns))
        if data.startswith(b"{") and data.endswith(b"\n") and data.count(b"\n") == 1:
            out.write(b'{"file":' + json.dumps(name).encode() + b"," + data[1:])
    return read


def _insert_rows(con, table: str, rows: list[tuple[str, int, int]]) -> None:
    """(file, size, mtime_ns) rows in one statement (DuckDB's executemany costs a statement a row)."""
    if rows:
        names, sizes, mtimes = (list(column) for column in zip(*rows))
        con.execute(f"INSERT INTO {table} SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]), unnest(?::BIGINT[])",
                    [names, sizes, mtimes])
