"""`hpcai-launch results jobs`: the receipts in the results store (ingested from
the spool first), listed, summarised by partition, user or GPU model, exported
as CSV or Parquet, or turned into the planner's job mix (--as-mix)."""
from __future__ import annotations

import datetime
import os
from pathlib import Path

import click

from hpcai.errors import UsageError
from hpcai.launcher.cli.guarded import run_guarded
from hpcai.launcher.report.safe_text import FORMULA_START

LIST_COLUMNS = ("job_id", "node", "user", "account", "partition", "state", "gpu_count", "start",
                "duration_s", "gpu_energy_j", "tier", "lost_gpus")
# Summaries: jobs, GPU-hours, GPU energy and its mean per GPU-hour (= mean W per GPU):
# (group key, GPU-hours, GPU energy, rows) per --summary.
SUMMARIES = {
    "partition": ("r.partition", "r.gpu_hours", "r.gpu_energy_j", "receipts r"),
    "user": ('r."user"', "r.gpu_hours", "r.gpu_energy_j", "receipts r"),
    "gpu": ("g.model", "r.duration_s / 3600.0", "g.energy_j", "receipts r JOIN receipt_gpus g USING (file)"),
}


def _filters(since, until, partition, user, state) -> tuple[str, list]:
    """(SQL on alias r, parameters); each value checked before anything is read."""
    where, params = [], []
    for flag, value, clause in (("--since", since, "r.start >= ?"),
                                ("--until", until, "r.start < ? + INTERVAL 1 DAY")):
        if value is not None:
            try:
                params.append(datetime.date.fromisoformat(value))
            except ValueError:
                raise UsageError(f"{flag} {value!r} is not a date", "give it as YYYY-MM-DD") from None
            where.append(clause)
    for value, clause in ((partition, "r.partition = ?"), (user, 'r."user" = ?'), (state, "r.state = ?")):
        if value is not None:
            where.append(clause)
            params.append(value)
    return " AND ".join(where) or "true", params


# The measurement tiers a row's energy stands on (a receipt from before tiers: "unknown").
TIERS_SQL = "array_to_string(list_sort(list(DISTINCT coalesce(r.tier, 'unknown'))), '+')"


def summary_sql(by: str, where: str) -> str:
    """One row per partition, user or GPU model over the finished receipts passing where."""
    key, hours, energy, rows = SUMMARIES[by]
    return (f"SELECT {key} AS {by}, count(DISTINCT r.file) AS jobs, sum({hours}) AS gpu_hours, "
            f"sum({energy}) / 3.6e6 AS gpu_energy_kwh, "
            f"sum({energy}) / 3600.0 / nullif(sum({hours}), 0) AS wh_per_gpu_hour, "
            f"{TIERS_SQL} AS tiers "
            f"FROM {rows} WHERE r.state <> 'open' AND {where} GROUP BY ALL ORDER BY gpu_hours DESC NULLS LAST")


def export_sql(where: str) -> str:
    """One row per job, node and GPU (gpu_ columns; a job without GPUs: one row, gpu_ NULL);
    text a spreadsheet could run gets report/safe_text.py's leading quote, in SQL."""
    from hpcai.launcher.receipts.store import GPU_COLUMNS, RECEIPT_COLUMNS

    inner = [f'r."{c}"' for c in RECEIPT_COLUMNS] + [f'g."{c}" AS "gpu_{c}"' for c in GPU_COLUMNS if c != "file"]
    types = {**RECEIPT_COLUMNS, **{f"gpu_{c}": t for c, t in GPU_COLUMNS.items() if c != "file"}}
    starts = ", ".join("'" + c + "'" for c in FORMULA_START)
    outer = [f'"{c}"' if t != "VARCHAR" else
             (f"""CASE WHEN left("{c}", 1) IN ({starts}) AND TRY_CAST("{c}" AS DOUBLE) IS NULL """
              f"""THEN chr(39) || "{c}" ELSE "{c}" END AS "{c}" """) for c, t in types.items()]
    return (f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM receipts r "
            f"LEFT JOIN receipt_gpus g USING (file) WHERE {where}) ORDER BY start, file, gpu_gpu_index")


def _text(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.5g}"
    return str(value).encode("unicode_escape").decode("ascii") if not str(value).isprintable() else str(value)


def _table(columns, rows) -> None:
    table = [list(columns)] + [[_text(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    for r in table:
        click.echo("  ".join(t.ljust(w) for t, w in zip(r, widths)).rstrip())


@click.command()
@click.option("--spool", type=click.Path(), help="the receipts spool to ingest first "
              "(default: the site's [receipts] spool, else /var/spool/hpcai/receipts)")
@click.option("--site", help="site file (its [receipts] spool and, for --as-mix, its [[classes]] rules)")
@click.option("--store", type=click.Path(), help="the DuckDB store file (default: the results index's place for the spool)")
@click.option("--since", help="only jobs started on or after this date (YYYY-MM-DD)")
@click.option("--until", help="only jobs started on or before this date (YYYY-MM-DD)")
@click.option("--partition", help="only jobs of this Slurm partition")
@click.option("--user", help="only jobs of this user")
@click.option("--state", type=click.Choice(["completed", "cancelled", "killed", "failed", "node-failed",
                                            "ended-without-epilog", "requeued", "open"]),
              help="only jobs that ended so")
@click.option("--summary", type=click.Choice(sorted(SUMMARIES)), help="one row per partition, user or GPU model")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), help="write the rows to -o as this")
@click.option("--output", "-o", type=click.Path(), help="file for --format (default format: its extension)")
@click.option("--as-mix", "as_mix", type=click.Path(), help="write the job mix (TOML) from measured GPU-hours per class")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1), help="rows to print")
def jobs(**options):
    """Per-job energy receipts: ingest the spool, then list, summarise, export or make the mix."""
    run_guarded(_jobs, **options)


def _check(options: dict) -> tuple[Path, str, list, str | None]:
    """Every option checked before the store is touched: (spool, where, params, format)."""
    from hpcai.launcher.receipts.spool import spool_path

    where, params = _filters(options["since"], options["until"], options["partition"],
                             options["user"], options["state"])
    fmt, out = options["fmt"], options["output"]
    if out is not None:
        fmt = fmt or {".csv": "csv", ".parquet": "parquet"}.get(Path(out).suffix.lower())
        if fmt is None:
            raise UsageError(f"cannot tell the format of {out}", "name it .csv or .parquet, or give --format")
        _check_output(Path(out))
    elif fmt is not None:
        raise UsageError("--format needs --output FILE", "give -o FILE")
    if options["as_mix"] is not None:
        _check_output(Path(options["as_mix"]))
        if not options["site"]:
            raise UsageError("--as-mix needs --site (its [[classes]] rules)", "give --site FILE")
    site_raw = _site_raw(_site_file(options["site"])) if options["site"] else {}
    spool = Path(options["spool"]) if options["spool"] else spool_path(site_raw)
    return spool, where, params, fmt


def _site_file(selector: str) -> Path:
    """--site: a .toml path, else a site's name (launcher/site/config.py finds its file)."""
    from hpcai.launcher.site import config as sites

    if selector.endswith(".toml") or os.sep in selector:
        return Path(selector)
    return Path(sites.load(selector)["path"])


def _site_raw(path: Path) -> dict:
    """The site file's sections as written (the site loader does not know [receipts] yet)."""
    from hpcai.launcher.power.helper import _toml

    try:
        return _toml().loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"cannot read the site file {path}: {exc}", "give --site a readable .toml") from None


def _check_output(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_file()):
        raise UsageError(f"{out} is a symbolic link or not a file", "choose another output file")
    if not out.parent.is_dir():
        raise UsageError(f"folder {out.parent} does not exist", "create it, or choose another output file")


def _jobs(**options):
    from hpcai.launcher.receipts import store

    spool, where, params, fmt = _check(options)
    rules = None
    if options["as_mix"]:
        from hpcai.launcher.receipts.mix import read_class_rules

        rules = read_class_rules(_site_file(options["site"]))
    con = store.open_store(spool, options["store"])
    try:
        if spool.exists() or options["spool"]:
            read, notes = store.ingest(con, spool)
            click.echo(f"{read} receipt file(s) ingested from {spool}", err=True)
            for note in notes:
                click.echo(f"note: {note}", err=True)
        else:
            click.echo(f"note: no spool at {spool}; the store as it is", err=True)
        if rules is not None:
            return _write_mix(con, rules, where, params, Path(options["as_mix"]), spool)
        if options["output"]:
            return _export(con, export_sql(where), params, Path(options["output"]), fmt)
        if options["summary"]:
            cursor = con.execute(summary_sql(options["summary"], where), params)
        else:
            cursor = con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in LIST_COLUMNS)} FROM receipts r "
                                 f"WHERE {where} ORDER BY start DESC NULLS LAST, file LIMIT {options['limit']}", params)
        _table([d[0] for d in cursor.description], cursor.fetchall())
        total = con.execute(f"SELECT count(*), sum(gpu_hours), sum(gpu_energy_j) / 3.6e6, {TIERS_SQL} "
                            f"FROM receipts r WHERE {where}", params).fetchone()
        click.echo(f"{total[0]} receipt(s), {_text(total[1])} GPU-hours, {_text(total[2])} kWh of GPU energy"
                   f" (measurement tier: {total[3] or '-'})")
        if "+" in (total[3] or ""):
            click.echo(f"note: these figures mix measurement tiers ({total[3]}): compare within one tier", err=True)
    finally:
        con.close()


def _write_mix(con, rules, where, params, out: Path, spool: Path) -> None:
    from hpcai.launcher.receipts.mix import measured_mix, mix_toml
    from hpcai.safe_files import Folder

    classes, unmatched = measured_mix(con, rules, where, tuple(params))
    text = mix_toml(classes, str(spool))
    with Folder.open(out.parent) as folder:
        folder.write_text(out.name, text)
    for c in classes:
        click.echo(f"{c['partition']}/{c['name']}: share {c['share']:.3f} of {_text(c['gpu_hours'])} GPU-hours, "
                   f"{_text(c['measured_wh_per_gpu_hour'])} Wh per GPU-hour")
    if unmatched:
        click.echo(f"note: {_text(unmatched)} GPU-hours match no class rule and are not in the mix", err=True)
    click.echo(f"mix of {len(classes)} class(es) written to {out}")


def _export(con, sql: str, params: list, out: Path, fmt: str) -> None:
    """DuckDB writes the file (no row passes through Python) in a private folder
    beside it, renamed over the name: a link put there meanwhile is replaced."""
    from hpcai.safe_files import written_by_a_tool

    with written_by_a_tool(out) as temp:
        con.execute(f"CREATE OR REPLACE TEMP TABLE selected AS {sql}", params)
        options = "FORMAT parquet, COMPRESSION zstd" if fmt == "parquet" else "FORMAT csv, HEADER true"
        con.execute(f"COPY selected TO '{str(temp).replace(chr(39), chr(39) * 2)}' ({options})")
        count = con.execute("SELECT count(*) FROM selected").fetchone()[0]
    click.echo(f"{count} row(s) (one per job, node and GPU) written to {out} ({fmt})")


def mix_from_receipts(selector: str, since: str | None, partition: str | None) -> str:
    """The mix TOML from the site's spool (ingested first) and [[classes]] rules, for
    `plan --mix-from-receipts`: the same as `results jobs --as-mix` writes."""
    from hpcai.launcher.receipts import store
    from hpcai.launcher.receipts.mix import measured_mix, mix_toml, read_class_rules
    from hpcai.launcher.receipts.spool import spool_path

    where, params = _filters(since, None, partition, None, None)
    site_file = _site_file(selector)
    rules = read_class_rules(site_file)
    spool = spool_path(_site_raw(site_file))
    con = store.open_store(spool, None)
    try:
        if spool.exists():
            store.ingest(con, spool)
        classes, _ = measured_mix(con, rules, where, tuple(params))
        return mix_toml(classes, str(spool))
    finally:
        con.close()
