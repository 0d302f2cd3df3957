"""`hpcai-launch check RESULT...`: each result's validity checks as a table.

RESULT is what `report` reads: result files, run folders, sweep folders, Slurm job
folders or a whole results folder (every result.json under it).

Validity is recomputed, never taken from the block the result carries: the
checks of hpcai/measure/validity.py with this version's thresholds, plus the
figures held to their own records and to samples.csv (launcher/bundles/
recompute.py), so a hand-edited throughput fails. Where the stored verdict
differs from the recomputed one, the line says so. Exit status 1 when any result has a failed
check; a file that is not an hpcai result is a one-line error, before any
table is printed.
"""
from __future__ import annotations

import errno
from pathlib import Path

import click

from hpcai.errors import UsageError

COLUMNS = ("check", "subject", "value", "threshold", "verdict", "note")
FAILED_EXIT = 1


HINT = "give result.json files, run folders, sweep folders or a results folder written by hpcai-launch"


def result_files(given: str) -> list[Path]:
    """The result files `given` names, as `report` reads them: a file; a run folder's
    result.json; else every result.json under a folder (a sweep, a Slurm job, a
    whole results folder), in path order."""
    path = Path(given)
    if not path.is_dir():
        return [path]
    if (path / "result.json").is_file():
        return [path / "result.json"]
    found = sorted(path.rglob("result.json"))
    if not found:
        raise UsageError(f"{given} holds no result.json", HINT)
    return found


def load_results_of(given: str) -> list[tuple[Path, dict]]:
    return [load_result(str(p)) for p in result_files(given)]


def load_result(given: str) -> tuple[Path, dict]:
    """(path, document) of one result file or run folder, or a one-line UsageError."""
    path = Path(given)
    if path.is_dir():
        path = path / "result.json"
    hint = HINT
    from hpcai.launcher.report.ingest import BadJSON, parse, read_bytes

    try:
        # Read as the report reads: no symbolic link followed, a size limit, no duplicate
        # keys; a file nested too deep is a reason, not a RecursionError traceback.
        doc, _ = parse(read_bytes(path))
    except BadJSON as exc:
        reason = str(exc).replace("not readable JSON", "not JSON", 1)
        raise UsageError(f"{path} is not an hpcai result ({reason})", hint) from None
    except FileNotFoundError:
        raise UsageError(f"{given} holds no result.json" if Path(given).is_dir()
                         else f"{given} does not exist", hint) from None
    except OSError as exc:
        why = "a symbolic link: not followed" if exc.errno == errno.ELOOP else exc.strerror
        raise UsageError(f"{path} cannot be read ({why})", hint) from None
    if not isinstance(doc, dict) or doc.get("kind") != "hpcai.result":
        what = (f"its kind is {doc.get('kind')!r}" if isinstance(doc, dict) and "kind" in doc
                else "no \"kind\": \"hpcai.result\"")
        raise UsageError(f"{path} is not an hpcai result ({what})", hint)
    return path, doc


def validity_of(doc: dict, samples: bytes | None = None) -> tuple[dict, str]:
    """The validity recomputed now from doc and its samples, and how it compares
    with the block the result carries (if any)."""
    from hpcai.launcher.bundles.recompute import recompute

    found = recompute(doc, samples)
    stored = doc.get("validity")
    if not (isinstance(stored, dict) and isinstance(stored.get("checks"), list)):
        return found, ("computed now: the result predates validity checks "
                       "(thresholds of this version)")
    said = str(stored.get("verdict", "?")).upper()
    agrees = "agrees" if stored.get("verdict") == found["verdict"] else "DIFFERS"
    return found, (f"recomputed with this version's thresholds; the stored verdict "
                   f"(by the {stored.get('evaluated_by', '?')}) was {said}: {agrees}")


def _value(c: dict) -> str:
    value = c.get("value")
    if value is None:
        return "–"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {c['unit']}" if c.get("unit") else text


def table(checks: list[dict], columns: int | None = None) -> list[str]:
    """The checks as aligned rows; the note wraps below its row past `columns` (a terminal's)."""
    from hpcai.launcher.cli.terminal import fitted

    rows = [[c.get("name", "?"), c.get("subject") or "run", _value(c), c.get("threshold") or "–",
             c.get("verdict", "?").upper() if c.get("verdict") == "fail" else c.get("verdict", "?"),
             c.get("note") or ""] for c in checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(COLUMNS[:-1])]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS[:-1], widths)) + "  note"]
    for row in rows:
        lines += fitted("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)), row[-1], columns)
    return lines


def check_results(paths: list[str]) -> int:
    from hpcai.launcher.bundles.recompute import samples_beside
    from hpcai.launcher.cli.terminal import width

    loaded = [pair for p in paths for pair in load_results_of(p)]  # every file, before any output
    failed_any = False
    for i, (path, doc) in enumerate(loaded):
        found, origin = validity_of(doc, samples_beside(path, doc))
        verdict = found.get("verdict", "?")
        failed_any |= verdict == "fail"
        if i:
            click.echo("")
        click.echo(f"{path}: {doc.get('workload', '?')} run {doc.get('run_id', '?')} "
                   f"({doc.get('status', '?')}), validity {verdict.upper()} — {origin}")
        terminal = width()
        for line in table(found.get("checks") or [], terminal - 2 if terminal else None):
            click.echo(f"  {line.rstrip()}")
    return FAILED_EXIT if failed_any else 0
