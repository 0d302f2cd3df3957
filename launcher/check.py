"""`hpcai-launch check RESULT...`: each result's validity checks as a table.

The checks a result carries (`validity`, hpcai/measure/validity.py) are printed as
written; a result from before validity existed is evaluated now, from its
document alone, and says so. Exit status 1 when any result has a failed
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


def load_result(given: str) -> tuple[Path, dict]:
    """(path, document) of one result file or run folder, or a one-line UsageError."""
    path = Path(given)
    if path.is_dir():
        path = path / "result.json"
    hint = "give result.json files (or run folders) written by hpcai-launch"
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


def validity_of(doc: dict) -> tuple[dict, str]:
    """The result's validity block, or one computed now; and where it came from."""
    from hpcai.measure import validity

    stored = doc.get("validity")
    if isinstance(stored, dict) and isinstance(stored.get("checks"), list):
        return stored, f"as recorded (by the {stored.get('evaluated_by', '?')})"
    return (validity.evaluate(doc, "check"),
            "computed now: the result predates validity checks (thresholds of this version)")


def _value(c: dict) -> str:
    value = c.get("value")
    if value is None:
        return "–"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {c['unit']}" if c.get("unit") else text


def table(checks: list[dict]) -> list[str]:
    rows = [[c.get("name", "?"), c.get("subject") or "run", _value(c), c.get("threshold") or "–",
             c.get("verdict", "?").upper() if c.get("verdict") == "fail" else c.get("verdict", "?"),
             c.get("note") or ""] for c in checks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(COLUMNS[:-1])]
    lines = ["  ".join(h.ljust(w) for h, w in zip(COLUMNS[:-1], widths)) + "  note"]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1])
    return lines


def check_results(paths: list[str]) -> int:
    loaded = [load_result(p) for p in paths]  # every file, before any output
    failed_any = False
    for i, (path, doc) in enumerate(loaded):
        found, origin = validity_of(doc)
        verdict = found.get("verdict", "?")
        failed_any |= verdict == "fail"
        if i:
            click.echo("")
        click.echo(f"{path}: {doc.get('workload', '?')} run {doc.get('run_id', '?')} "
                   f"({doc.get('status', '?')}), validity {verdict.upper()} — {origin}")
        for line in table(found.get("checks") or []):
            click.echo(f"  {line.rstrip()}")
    return FAILED_EXIT if failed_any else 0
