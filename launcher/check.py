"""`hpcai-launch check RESULT...`: each result's validity checks as a table.

RESULT is what `report` reads: result files, run folders, sweep folders, Slurm job
folders or a whole results folder (every result.json under it).

The checks a result carries (`validity`, hpcai/measure/validity.py) are printed as
written; a result from before validity existed is evaluated now, from its
document alone, and says so. Exit status 1 when any result has a failed
check; a file that is not an hpcai result is a one-line error, before any
table is printed.
"""
from __future__ import annotations

import json
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
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{given} holds no result.json" if Path(given).is_dir()
                         else f"{given} does not exist", hint) from None
    except OSError as exc:
        raise UsageError(f"{path} cannot be read ({exc.strerror})", hint) from None
    except ValueError as exc:  # UnicodeDecodeError included
        reason = " ".join(str(exc).split())
        raise UsageError(f"{path} is not an hpcai result (not JSON: {reason})", hint) from None
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
    loaded = [pair for p in paths for pair in load_results_of(p)]  # every file, before any output
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
