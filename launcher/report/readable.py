"""Keeping the report readable over thousands of results: the pages show the
first rows of a long table and the first series of a crowded plot, and say how
many more there are; the CSV files and report.json keep every row.
"""
from __future__ import annotations

from dataclasses import replace

PAGE_ROWS = 200  # rows of one table on report.md/.html
PLOT_SERIES = 8  # series (rows of the cap tables) in one plot
PLOT_BARS = 30  # bars in one bar chart


def page_table(table):
    """table as the pages show it: at most PAGE_ROWS rows, then how many more."""
    count = len(table.rows) + (len(table.more) if table.more is not None else 0)
    if count <= PAGE_ROWS:
        return table
    more = count - PAGE_ROWS
    return replace(table, rows=table.rows[:PAGE_ROWS], more=None,
                   notes=[f"… and {more} more rows: every row is in {table.key}.csv "
                          "(and report.json)."] + list(table.notes))


def for_pages(sections: list[tuple[str, list]]) -> list[tuple[str, list]]:
    # A table is what has rows (report/tables.py Table; not imported: tables.py builds its
    # long tables' first page here, report/long_tables.py).
    return [(heading, [page_table(i) if hasattr(i, "rows") else i for i in items])
            for heading, items in sections]


def first_series(cells: list) -> tuple[list, int]:
    """The cells of the first PLOT_SERIES groups (table rows), and how many groups were left out."""
    groups = list(dict.fromkeys(c.group for c in cells))
    if len(groups) <= PLOT_SERIES:
        return cells, 0
    kept = set(groups[:PLOT_SERIES])
    return [c for c in cells if c.group in kept], len(groups) - PLOT_SERIES


def series_note(left_out: int) -> str:
    return (f" The first {PLOT_SERIES} series are drawn; {left_out} more are in cells.csv "
            "and the tables." if left_out else "")
