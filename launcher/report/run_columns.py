"""A Run as columns of the results index, and back again in bulk.

Rebuilding 100,000 Runs from one JSON blob each took most of a warm report
(a decoded dict per run, keyword construction, a quarter of a gigabyte of
text at once). Here each field of Run is a column of its own, named as the
field (the one copy of it in the index; its path is the files' key): scalars as
typed DuckDB columns (VARCHAR, DOUBLE, BIGINT, BOOLEAN), read back a column at
a time in batches (store.column_batches) and passed to Run positionally; lists
as DuckDB lists (DOUBLE[], VARCHAR[]: a user's query reads them as lists), the
few structured fields (power_doc, facility, input, point) as compact JSON text.
Both are read back as JSON text (lists through to_json, which writes each
double exactly), decoded once per distinct text: runs of one campaign share their
facility, input and most of their power section, so equal texts become one
shared dict (read-only for the report, which never changes them; lists are
copied, since `problems` grows after loading).

A value that a typed column cannot hold exactly (text that is not UTF-8, a
non-finite float, a wrong type in an invalid result) goes to the row's
`extra_json` object instead and wins over the column: the round trip is
exact, field by field. (A whole number where Run declares a float is read as
that float by load.py, so it is in its DOUBLE column.)
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math

EXTRA = "extra_json"
KEY = "path"  # the files table's key column holds the Run's path: one copy
_SQL = {"str": "VARCHAR", "float": "DOUBLE", "int": "BIGINT", "bool": "BOOLEAN",
        "floats": "DOUBLE[]", "strs": "VARCHAR[]", "json": "VARCHAR"}
_LISTS = {"list[float]": "floats", "list[str]": "strs"}
_INT64 = 2 ** 63


def layout(run_class) -> list[tuple[str, str]]:
    """(field, kind) in the Run's field order; kind from the field's annotation."""
    out = []
    for f in dataclasses.fields(run_class):
        annotation = str(f.type)
        base = annotation.replace(" | None", "").strip()
        if base in ("str", "float", "int", "bool"):
            kind = base
        else:
            kind = _LISTS.get(base, "json")
        out.append((f.name, kind))
    return out


@functools.lru_cache(maxsize=None)
def float_fields(run_class) -> tuple[str, ...]:
    """The Run's fields declared float."""
    return tuple(name for name, kind in layout(run_class) if kind == "float")


def columns(run_class) -> dict[str, str]:
    """The index's columns for a Run: one per field (its path: the key column), and
    the exceptions."""
    return {**{name: _SQL[kind] for name, kind in layout(run_class) if name != KEY}, EXTRA: "VARCHAR"}


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (bytes that were not UTF-8)
        return False
    return "\x00" not in text


def _typed(kind: str, value):
    """(True, column value) when the typed column holds value exactly, else (False, None)."""
    if value is None:
        return True, None
    kind_type = type(value)
    if kind == "str":
        return (True, value) if kind_type is str and _utf8(value) and "\x00" not in value else (False, None)
    if kind == "float":
        return (True, value) if kind_type is float and math.isfinite(value) else (False, None)
    if kind == "int":
        return (True, value) if kind_type is int and -_INT64 <= value < _INT64 else (False, None)
    if kind == "bool":
        return (True, value) if kind_type is bool else (False, None)
    if kind in ("floats", "strs"):  # a DuckDB list, where each item fits its type
        item = "float" if kind == "floats" else "str"
        fits = kind_type is list and all(_typed(item, v)[0] and v is not None for v in value)
        return (True, value) if fits else (False, None)
    return True, json.dumps(value, ensure_ascii=True, separators=(",", ":"))  # NaN kept as NaN


def encode(run, fields: list[tuple[str, str]], key: str) -> dict:
    """The Run's columns (name -> JSON-ready value) for one row of the index; key:
    the row's path column (the path as shown, where it is not plain UTF-8)."""
    row, extra = {}, {}
    for name, kind in fields:
        value = getattr(run, name)
        if name == KEY:
            if value != key:  # JSON keeps a lone surrogate (a non-UTF-8 byte) as \udcXX
                extra[name] = value
            continue
        fits, stored = _typed(kind, value)
        row[name] = stored
        if not fits:
            extra[name] = value
    row[EXTRA] = json.dumps(extra, ensure_ascii=True, separators=(",", ":")) if extra else None
    return row


def select_list(fields: list[tuple[str, str]]) -> str:
    """The columns a Decoder reads; lists as their JSON text (equal texts decoded once)."""
    return ", ".join(f'"{KEY}" AS run_path' if name == KEY
                     else f'to_json("{name}")::VARCHAR' if kind in ("floats", "strs")
                     else f'"{name}"' for name, kind in fields) + f', "{EXTRA}"'


class Decoder:
    """Rows of select_list's columns to Runs; equal JSON texts decoded once."""

    def __init__(self, run_class, fields: list[tuple[str, str]]):
        self.Run, self.fields = run_class, fields
        if fields[0] != ("path", "str"):
            raise ValueError("a Run's first field must be its path, as text")
        self.seen: list[dict] = [{} for _ in fields]  # per field: JSON text -> value
        self.extras: dict[str, dict] = {}  # a campaign's exceptions repeat: {"units": 4}

    def runs(self, columns: list[list], paths: list | None = None) -> list:
        """Runs from select_list's columns (lists of one length); paths: the files'
        paths as the walk found them (the same files: used instead of the path column,
        which holds a path that is not UTF-8 as shown, the real one in the exceptions)."""
        if not columns or not columns[0]:
            return []
        values = [paths if i == 0 and paths is not None else self._column(i, kind, columns[i])
                  for i, (_, kind) in enumerate(self.fields)]
        made = [self.Run(*args) for args in zip(*values)]
        for run, extra in zip(made, columns[-1]):
            if extra is not None:
                parsed = self.extras.get(extra)
                if parsed is None:
                    parsed = self.extras[extra] = json.loads(extra)
                self._apply(run, parsed)
        return made

    def _column(self, i: int, kind: str, column: list) -> list:
        if kind not in ("json", "floats", "strs"):
            return column
        seen = self.seen[i]
        for text in set(column).difference(seen):  # each new text decoded once
            if text is not None:
                seen[text] = json.loads(text)
        values = list(map(seen.get, column))  # None (no text) is never a key: None
        if any(type(value) is list for value in seen.values()):
            return [list(value) if type(value) is list else value for value in values]
        return values

    def _apply(self, run, extra: dict) -> None:
        for name, value in extra.items():
            if type(value) is list:
                value = list(value)  # never shared between runs
            setattr(run, name, value)
