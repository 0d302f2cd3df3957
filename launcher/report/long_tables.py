"""Tables with a row per run (all runs, runs not included, origins) over a fleet's
100,000 results: the pages show the first readable.PAGE_ROWS rows, so only those
become cells (TCell); the rest are made from the runs while the CSV and report.json
are written, one row at a time, and never held.

A row function gives one source item's (texts, values): the texts are what a
cell's text would be, the values its number (None for text), so a row made here
is written exactly as the same row made of cells.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

Row = Callable[[object], tuple[list[str], list]]


@dataclass
class LongRows:
    """The rows of a table beyond its cells: made from items by row, when written."""

    items: Sequence
    row: Row

    def __len__(self) -> int:
        return len(self.items)

    def texts(self) -> Iterator[list[str]]:
        row = self.row
        return (row(item)[0] for item in self.items)

    def csv_rows(self) -> Iterator[list]:
        """Each row's CSV values (before safe_text.csv_cell), as the cells' would be."""
        row = self.row
        for item in self.items:
            yield plain_csv_values(*row(item))


def plain_csv_values(texts: list[str], values: list) -> list[str]:
    """A row's CSV values from its cells' texts and numbers: numbers at full
    precision, no number as its text ("–": empty). One expression, no call per
    value: over a fleet's runs that is most of a second."""
    return [("" if t == "–" else t) if v is None else str(v) if isinstance(v, int) else repr(float(v))
            for t, v in zip(texts, values)]


def plain_csv_value(text: str, value) -> str:
    """One cell's plain_csv_values."""
    return plain_csv_values([text], [value])[0]


def split_rows(items: Sequence, row: Row, cell: type) -> tuple[list[list], LongRows | None]:
    """The first page's rows as cells (cell: report/tables.py TCell), the others as
    LongRows (None if none)."""
    from hpcai.launcher.report import readable

    head = items[:readable.PAGE_ROWS]
    cells = [[cell(t, v) for t, v in zip(*row(item))] for item in head]
    rest = items[readable.PAGE_ROWS:]
    return cells, (LongRows(rest, row) if len(rest) else None)


def all_texts(table) -> list | Iterator[list[str]]:
    """Every row's texts, for report.json: an iterator where rows are made as written."""
    head = [[c.text for c in row] for row in table.rows]
    return head if table.more is None else chain(head, table.more.texts())
