"""report.json: indented two spaces down to the items of each list, each list item
on one line. A fleet's report has 100,000s of them (cells, best caps, table rows):
one line each keeps the file readable and greppable, and lets the standard
library's C encoder write each in one call. Indented throughout, json.dump
encodes in pure Python, one generator step per value: seconds at that size.

Written as json.dump(doc, default=str, allow_nan=False) would write the same
values: NaN and infinities refused, other objects as their str(). An iterator
that is a dict's value or a list's item is written as a list without being
held; a long table's rows (long_tables.StringRows, given as columns) are
written a column at a time; a Part, made beforehand (in another process), is
copied in.
"""
from __future__ import annotations

import io
import json
import math
from json.encoder import encode_basestring_ascii as _str  # the C encoder where built

from hpcai.launcher.report.long_tables import StringRows

_INDENT = "  "
ITEM_SEPARATOR, KEY_SEPARATOR = ", ", ": "  # inside a one-line item, as json.dumps spaces them
ROWS_AT_ONCE = 10_000  # rows of a long table encoded in one pass: a few MB of text
FLUSH_CHARS = 1 << 20  # many small pieces, few file writes of about this much


class Part:
    """A value's JSON text made beforehand, at its place's nesting level, in a binary
    file (write_part): copied into the document as it is."""

    __slots__ = ("file",)

    def __init__(self, file):
        self.file = file


def write_part(value, level: int, file) -> None:
    """value as dump writes it at that nesting level, into the binary file (from its
    start: a file written before, by a worker that died, is overwritten), for a
    Part(file) of the document. Another process can make it (a file it inherited):
    the text is ASCII."""
    file.seek(0)
    file.truncate()
    text = io.TextIOWrapper(file, encoding="ascii", write_through=True)
    try:
        _dump(value, level, text)
    finally:
        text.flush()
        text.detach()
    file.flush()


def dump(doc, fh) -> None:
    """doc to the text file fh."""
    _dump(doc, 0, fh)


def _dump(value, level: int, fh) -> None:
    chunks: list[str] = []
    held = 0

    def write(text: str) -> None:
        nonlocal held
        chunks.append(text)
        held += len(text)
        if held >= FLUSH_CHARS:
            fh.write("".join(chunks))
            chunks.clear()
            held = 0

    _write(value, level, write, _item_encoder())
    fh.write("".join(chunks))


def _item_encoder():
    """One list item (a dict or list) as one line of JSON, by the C encoder."""
    try:
        from json.encoder import c_make_encoder
    except ImportError:
        c_make_encoder = None
    if c_make_encoder is None:  # a Python built without _json
        encoder = json.JSONEncoder(separators=(ITEM_SEPARATOR, KEY_SEPARATOR), default=str,
                                   allow_nan=False)
        return encoder.encode
    encode = c_make_encoder(None, str, _str, None, KEY_SEPARATOR, ITEM_SEPARATOR, False, False,
                            False)
    return lambda item: "".join(encode(item, 0))


def _float(o: float) -> str:
    if not math.isfinite(o):
        raise ValueError("Out of range float values are not JSON compliant: " + repr(o))
    return float.__repr__(o)


# By exact type, the common case: one lookup instead of a chain of isinstance checks.
_BY_TYPE = {str: _str, float: _float, int: int.__repr__, bool: lambda o: "true" if o else "false",
            type(None): lambda o: "null"}


def _scalar(o) -> str | None:
    """The JSON text of a scalar, None for a container or another type. The
    order of the checks is json.encoder._make_iterencode's (bool before int)."""
    encode = _BY_TYPE.get(type(o))
    if encode is not None:
        return encode(o)
    if isinstance(o, str):
        return _str(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    return None


def _key(k) -> str:
    if isinstance(k, str):
        return _str(k)
    if isinstance(k, float):
        return _str(_scalar(k))
    if k is True or k is False or k is None:
        return _str(_scalar(k))
    if isinstance(k, int):
        return _str(int.__repr__(k))
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def _write(o, level: int, write, item) -> None:
    text = _scalar(o)
    if text is not None:
        write(text)
    elif isinstance(o, Part):
        o.file.seek(0)
        while piece := o.file.read(FLUSH_CHARS):
            write(piece.decode("ascii"))
    elif isinstance(o, StringRows):
        _write_string_rows(o.columns, level, write)
    elif isinstance(o, (list, tuple)) or _is_stream(o):
        _write_list(o, level, write, item)
    elif isinstance(o, dict):
        _write_dict(o, level, write, item)
    else:
        write(_str(str(o)))  # default=str


def _is_stream(o) -> bool:
    return hasattr(o, "__next__") and hasattr(o, "__iter__")


def _write_list(items, level: int, write, item) -> None:
    inner = "\n" + _INDENT * (level + 1)
    first = True
    for value in items:
        text = _scalar(value)
        if text is None:
            text = item(list(value) if _is_stream(value) else value)
        write(("[" if first else ",") + inner + text)
        first = False
    write("[]" if first else "\n" + _INDENT * level + "]")


def _write_string_rows(columns: list[list[str]], level: int, write) -> None:
    """Rows of strings given as columns (report/long_tables.py), each on one line:
    each column through the C string encoder, each row one join, no Python step
    per row."""
    count = len(columns[0]) if columns else 0
    if not count:
        write("[]")
        return
    inner = "\n" + _INDENT * (level + 1)
    in_row, between_rows = ITEM_SEPARATOR, "]," + inner + "["
    for start in range(0, count, ROWS_AT_ONCE):
        encoded = [list(map(_str, column[start:start + ROWS_AT_ONCE])) for column in columns]
        write(("[" if start == 0 else "],") + inner + "["
              + between_rows.join(map(in_row.join, zip(*encoded))))
    write("]\n" + _INDENT * level + "]")


def _write_dict(o: dict, level: int, write, item) -> None:
    if not o:
        write("{}")
        return
    inner = "\n" + _INDENT * (level + 1)
    first = True
    for key, value in o.items():
        text = _scalar(value)
        head = ("{" if first else ",") + inner + _key(key) + ": "
        first = False
        if text is not None:
            write(head + text)
        else:
            write(head)
            _write(value, level + 1, write, item)
    write("\n" + _INDENT * level + "}")
