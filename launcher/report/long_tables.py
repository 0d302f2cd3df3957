"""Tables with a row per run (all runs, runs not included, origins) over a fleet's
100,000 results, made column by column: a column is one list comprehension over
the runs, and the CSV and report.json write them with C-speed loops (csv's
writerows over zip, the JSON string encoder over each column), not a Python
call per row. Only the first page (readable.PAGE_ROWS rows) becomes cells
(TCell) for the pages; the rest stay columns (LongRows).

A table's columns give, for each column, its texts (what a cell's text would be)
and its values (a cell's number; None for a column of text), so a row written
from the columns is written exactly as the same row made of cells.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

from hpcai.launcher.report.safe_text import csv_row

Column = tuple[list[str], "list | None"]  # (texts, values or None for text only)


@dataclass
class LongRows:
    """The rows of a table beyond its cells, as columns."""

    columns: list[Column]

    def __len__(self) -> int:
        return len(self.columns[0][0]) if self.columns else 0

    def text_columns(self) -> list[list[str]]:
        return [texts for texts, _ in self.columns]

    def csv_columns(self) -> list[list[str]]:
        """Each column's CSV values as the cells' would be, safe for a spreadsheet."""
        return [csv_row(["" if t == "–" else t for t in texts] if values is None
                        else plain_csv_values(texts, values))
                for texts, values in self.columns]


class RowCount:
    """A table's rows beyond its first page where only their number is known here: a
    table made by the report's figures' worker, which wrote its CSV and its rows'
    part of report.json (report/__init__.py _cell_tables). The pages say how many."""

    def __init__(self, count: int):
        self.count = count

    def __len__(self) -> int:
        return self.count


def text_column(texts: list[str]) -> Column:
    """A column of text: no values."""
    return texts, None


def plain_csv_values(texts: list[str], values: list) -> list[str]:
    """CSV values from texts and their numbers (a row's, or a column's): numbers at
    full precision, no number as its text ("–": empty). One expression, no call
    per value: over a fleet's runs that is most of a second."""
    return [("" if t == "–" else t) if v is None else str(v) if isinstance(v, int) else repr(float(v))
            for t, v in zip(texts, values)]


def plain_csv_value(text: str, value) -> str:
    """One cell's plain_csv_values (without the lists: a fleet's cap tables have a
    hundred thousand cells)."""
    if value is None:
        return "" if text == "–" else text
    return str(value) if isinstance(value, int) else repr(float(value))


def split_columns(columns: list[Column], cell: type) -> tuple[list[list], LongRows | None]:
    """The first page's rows as cells (cell: report/tables.py TCell), the others as
    LongRows (None if none)."""
    from hpcai.launcher.report import readable

    page = readable.PAGE_ROWS
    count = len(columns[0][0]) if columns else 0
    head = zip(*(zip(texts[:page], repeat(None) if values is None else values[:page])
                 for texts, values in columns))
    cells = [[cell(t, v) for t, v in row] for row in head]
    if count <= page:
        return cells, None
    return cells, LongRows([(texts[page:], None if values is None else values[page:])
                            for texts, values in columns])


class StringRows:
    """Rows of strings given as columns, for report.json (json_stream writes them
    with the C string encoder, a column at a time)."""

    def __init__(self, columns: list[list[str]]):
        self.columns = columns


def all_texts(table) -> list | StringRows:
    """Every row's texts, for report.json."""
    head = [[c.text for c in row] for row in table.rows]
    if table.more is None:
        return head
    more = table.more.text_columns()
    return StringRows([[row[i] for row in head] + column for i, column in enumerate(more)])
