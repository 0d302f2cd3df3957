"""Table lines that fit the terminal they are printed on.

A table's last column (a note, a path) is free text of any length: on a terminal
narrower than the line, it continues on lines of its own below the row, indented
and wrapped to the terminal's width, so every row's fixed columns stay aligned.
Where the output is no terminal (a file, a pipe) every row stays one line, as a
script reading it expects.
"""
from __future__ import annotations

import shutil
import sys
import textwrap

CONTINUATION = "      "  # the last column's continuation lines start here


def width(stream=None) -> int | None:
    """The terminal's columns, or None when the stream is no terminal."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    return shutil.get_terminal_size((100, 24)).columns


def fitted(fixed: str, last: str, columns: int | None) -> list[str]:
    """One row: `fixed` (its aligned columns) then `last`, wrapped below it when the
    line would pass `columns` (None: never wrapped)."""
    line = f"{fixed}  {last}".rstrip() if last else fixed.rstrip()
    if columns is None or len(line) <= columns or not last:
        return [line]
    room = max(columns - len(CONTINUATION), 20)
    return [fixed.rstrip(), *(CONTINUATION + part for part in textwrap.wrap(last, room))]
