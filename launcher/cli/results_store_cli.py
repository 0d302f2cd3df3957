"""`hpcai-launch results ls|show|export`: the results store, queried (registered on
the `results` group of launcher/cli/results_cli.py beside the bundle commands).

Each command first brings the index up to date for the folders given (only new
or changed result files are read: launcher/report/store.py), then asks DuckDB.
Filters: workload, GPU model, cap, site, start date. A copy of a run (same run
id and content) is listed as a duplicate and never counted.
"""
from __future__ import annotations

import datetime
from pathlib import Path

import click

from hpcai.errors import UsageError
from hpcai.launcher.cli.guarded import run_guarded
from hpcai.launcher.report.run_columns import EXTRA
from hpcai.printable import printable

LS_COLUMNS = ("run_id", "counted", "workload", "device", "site", "cap_w", "per_gpu", "started", "path")
EXPORT_COLUMNS = ("run_id", "sha256", "counted", "duplicate_of", "status", "problems", "workload",
                  "preset", "device", "device_full", "site", "host", "processes", "cap_w", "enforced",
                  "unit", "per_gpu", "node_throughput", "mean_power_w", "units_per_joule_with_overhead",
                  "sweep_id", "repeat", "started", "path", "size", "mtime_ns")


@click.group()
def results():
    """The store's commands, before launcher/cli/results_cli.py adds them to its group."""


def _filters(func):
    options = [
        click.argument("paths", nargs=-1, required=True, type=click.Path()),
        click.option("--workload", help="only this workload (e.g. resnet50)"),
        click.option("--gpu", help="only this GPU model: its short name (H100) or part of its full name"),
        click.option("--cap", help="only this cap in watts, or 'uncapped'"),
        click.option("--site", help="only results from this site"),
        click.option("--since", help="only runs started on or after this date (YYYY-MM-DD)"),
        click.option("--until", help="only runs started on or before this date (YYYY-MM-DD)"),
        click.option("--counted", is_flag=True, help="only runs the report counts (complete, valid, not a copy)"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _date(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    try:
        return datetime.date.fromisoformat(value).isoformat()
    except ValueError:
        raise UsageError(f"{flag} {value!r} is not a date", "give it as YYYY-MM-DD") from None


def _cap(value: str | None):
    if value is None or value == "uncapped":
        return value
    try:
        return float(value.removesuffix("W").removesuffix("w"))
    except ValueError:
        raise UsageError(f"--cap {value!r} is not a number of watts", "give e.g. --cap 300 or --cap uncapped") from None


def query(paths, workload=None, gpu=None, cap=None, site=None, since=None, until=None,
          counted=False, run_id=None, parquet: Path | None = None) -> tuple[list[str], list[tuple]]:
    """(columns, rows) of the indexed results under paths that pass the filters; with
    parquet, those rows written there by DuckDB instead (rows: just their count).
    Every filter is checked before the index is touched."""
    from hpcai.launcher.report.load import kit
    from hpcai.launcher.report.store import COPIES, SAME_RUN, under_clause, index, open_index, roots

    since, until, cap = _date(since, "--since"), _date(until, "--until"), _cap(cap)
    given = roots(paths)
    con, note = open_index(kit(), given)
    try:
        index(kit(), paths, allow_empty=True, con=con)
        scope, params = under_clause(given)
        where = [scope]
        for clause, value in (("lower(workload) = lower(?)", workload), ("site = ?", site),
                              ("run_id = ?", run_id), ("substr(started, 1, 10) >= ?", since),
                              ("substr(started, 1, 10) <= ?", until)):
            if value is not None:
                where.append(clause)
                params.append(value)
        if gpu is not None:
            where.append("(lower(device) = lower(?) OR contains(lower(device_full), lower(?)))")
            params += [gpu, gpu]
        if cap == "uncapped":
            where.append("cap_w IS NULL")
        elif cap is not None:
            where.append("cap_w = ?")
            params.append(cap)
        # Copies as the report marks them (store.COPIES). Named as `results export` has
        # always named them: sha256, node_throughput, and the problems as one
        # "; "-separated text.
        sql = f"""
            WITH ranked AS (
                SELECT * EXCLUDE ({EXTRA}) REPLACE (array_to_string(problems, '; ') AS problems),
                       content_hash AS sha256, node AS node_throughput, {COPIES}
                FROM files WHERE {where[0]} {SAME_RUN})
            SELECT *, (usable AND copy = 1) AS counted,
                   CASE WHEN copy > 1 THEN first_path END AS duplicate_of
            FROM ranked WHERE {' AND '.join(where[1:]) or 'true'}
            {'AND usable AND copy = 1' if counted else ''}
            ORDER BY started NULLS LAST, path"""
        if parquet is not None:  # DuckDB writes it: no row passes through Python
            con.execute(f"CREATE TEMP TABLE selected AS {sql}", params)
            quoted = ", ".join(f'"{c}"' for c in EXPORT_COLUMNS)
            con.execute(f"COPY (SELECT {quoted} FROM selected) "
                        f"TO '{_sql_text(parquet)}' (FORMAT parquet, COMPRESSION zstd)")
            return [], con.execute("SELECT count(*) FROM selected").fetchall()
        cursor = con.execute(sql, params)
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    finally:
        con.close()
    if note:
        click.echo(f"note: {note}", err=True)
    return columns, rows


def _counted(row, at: dict) -> str:
    """"yes"; "copy" (a duplicate); else "no:" and why: its status, or for a complete
    run left out the first of its problems (a failed validity check, a trust problem)."""
    if row[at["counted"]]:
        return "yes"
    if row[at["duplicate_of"]]:
        return "copy"
    status = row[at["status"]] or "?"
    if status != "complete":
        return f"no: {status}"
    problems = _text(row[at["problems"]]) if "problems" in at else "–"
    return "no: " + (problems.split(":")[0] if problems != "–" else "left out")


def _text(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, list):
        return ", ".join(map(_text, value))
    if isinstance(value, float):
        return f"{value:.5g}"
    return printable(value)  # a path with a newline or escape code is shown escaped


@results.command(name="ls")
@_filters
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1),
              help="rows to print (the rest: counted, and in `results export`)")
def ls(paths, limit, **filters):
    """List the results under PATHS (folders or result files)."""
    run_guarded(_ls, paths, limit, **filters)


def _ls(paths, limit, **filters):
    columns, rows = query(paths, **filters)
    at = {c: i for i, c in enumerate(columns)}
    from hpcai.launcher.cli.terminal import fitted, width

    table = [list(LS_COLUMNS)] + [[_text(row[at[c]]) if c != "counted" else _counted(row, at)
                                   for c in LS_COLUMNS] for row in rows[:limit]]
    widths = [max(len(r[i]) for r in table) for i in range(len(LS_COLUMNS) - 1)]
    columns = width()
    for r in table:
        for line in fitted("  ".join(t.ljust(w) for t, w in zip(r, widths)), r[-1], columns):
            click.echo(line)
    counted = sum(1 for row in rows if row[at["counted"]])
    more = f"; {len(rows) - limit} more not printed (--limit)" if len(rows) > limit else ""
    click.echo(f"{len(rows)} result(s), {counted} counted{more}")


@results.command()
@click.argument("run_id")
@_filters
def show(run_id, paths, **filters):
    """Every indexed field of run RUN_ID under PATHS, and its copies."""
    run_guarded(_show, run_id, paths, **filters)


def _show(run_id, paths, **filters):
    from hpcai.launcher.report.load import kit
    from hpcai.launcher.report.run_columns import layout

    columns, rows = query(paths, run_id=run_id, **filters)
    if not rows:
        raise UsageError(f"no result with run id {run_id!r} under {', '.join(paths)}",
                         "list them with `hpcai-launch results ls PATHS`")
    # Not shown: the query's helpers, the stat fields no one reads, and the result's
    # structured sections (the power section, the site's facility...): JSON in the index.
    hidden = {"copy", "first_path", "ino", "ctime_ns", "content_hash", "node"}
    hidden.update(name for name, kind in layout(kit().Run) if kind == "json")
    for n, row in enumerate(rows):
        if n:
            click.echo("")
        for column, value in zip(columns, row):
            if column not in hidden:
                click.echo(f"{column:31s} {_text(value)}")


@results.command()
@_filters
@click.option("--output", "-o", required=True, type=click.Path(),
              help="file to write: .csv, or .parquet (zstd)")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]),
              help="default: from the output's extension")
def export(paths, output, fmt, **filters):
    """Write the results under PATHS (one row each, copies marked) as CSV or Parquet."""
    run_guarded(_export, paths, output, fmt, **filters)


def _export(paths, output, fmt, **filters):
    out = Path(output)
    fmt = fmt or {".csv": "csv", ".parquet": "parquet"}.get(out.suffix.lower())
    if fmt is None:
        raise UsageError(f"cannot tell the format of {output}", "name it .csv or .parquet, or give --format")
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise UsageError(f"{output} is a symbolic link or not a file", "choose another --output")
    if not out.parent.is_dir():
        raise UsageError(f"folder {out.parent} does not exist", "create it, or choose another --output")
    # Written in a private folder beside, then renamed over: a link put at the name
    # meanwhile is replaced, never followed.
    from hpcai.safe_files import written_by_a_tool

    with written_by_a_tool(out) as temp:
        if fmt == "parquet":
            _, ((count,),) = query(paths, parquet=temp, **filters)
        else:
            columns, rows = query(paths, **filters)
            at = {c: i for i, c in enumerate(columns)}
            _write_csv(temp, [[row[at[c]] for c in EXPORT_COLUMNS] for row in rows])
            count = len(rows)
    click.echo(f"{count} result(s) written to {output} ({fmt})")


def _write_csv(path: Path, rows: list) -> None:
    import csv

    from hpcai.launcher.report.safe_text import csv_row

    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as fh:
        writer = csv.writer(fh)
        writer.writerow(EXPORT_COLUMNS)
        writer.writerows(csv_row(row) for row in rows)


def _sql_text(path: Path) -> str:
    return str(path).replace("'", "''")
