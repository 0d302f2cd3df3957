"""The origin (site) and verification of the runs behind each row of the
throughput and efficiency tables, where several origins meet (issue 28):
results of more than one site, or any run read from a signed bundle. Then each
row says whose runs its cells average and whether they verified, beside the
per-run section (report/origins.py). A run whose bundle failed verification is
never in a cell (it has a problem, so it is not usable), only in that section.
"""
from __future__ import annotations

UNSIGNED = "unsigned"
HEADER = "Origin"
PAPER = "seed paper (published)"
NOTE = ("Origin: the site whose runs the row's cells average (a bundle's: the site whose "
        "trusted key signed it) and their verification: verified, unsigned (a loose "
        "result); a bundle that failed is never averaged (see Origin and verification).")


def _site(run) -> str:
    return run.origin or run.site or "?"


def wanted(runs: list) -> bool:
    """As the origins section: any run from a bundle, or more than one site."""
    return (any((r.verification or UNSIGNED) != UNSIGNED for r in runs)
            or len({_site(r) for r in runs}) > 1)


def text(runs: list) -> str:
    """"centre-a (verified)"; mixed: "centre-a (verified 2, unsigned 1); centre-b (…)"."""
    by_site: dict[str, dict[str, int]] = {}  # site -> verification -> runs
    for run in runs:
        site = _site(run)
        kinds = by_site.get(site)
        if kinds is None:  # (setdefault would make a dict per run: most of the time)
            kinds = by_site[site] = {}
        kind = run.verification or UNSIGNED
        kinds[kind] = kinds.get(kind, 0) + 1
    parts = []
    for site, kinds in by_site.items():
        if len(kinds) == 1:
            parts.append(f"{site} ({next(iter(kinds))})")
        else:
            parts.append(f"{site} (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")")
    return "; ".join(parts) or "–"


def row_text(cells: list) -> str:
    """The origins of the runs averaged into one row's cells (None: no cell)."""
    return text([run for cell in cells if cell is not None for run in cell.runs])
