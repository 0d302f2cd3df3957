"""report.json written as json.dump(doc, fh, indent=2, default=str, allow_nan=False)
writes it, byte for byte, at C speed where it counts.

With an indent, the standard library encodes in pure Python, one generator step
per value: over 100,000 runs the tables alone are millions of strings. Here a
list of strings (a table's row, a cell's run ids) is one join of the C string
encoder's output, and any iterator that is not a list (a long table's rows, made
while they are written) is written as a list without being held in memory.
"""
from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _str  # the C encoder where built

_INDENT = "  "


def dump(doc, fh) -> None:
    """doc to the text file fh, as json.dump(..., indent=2, default=str, allow_nan=False)."""
    chunks: list[str] = []

    def write(text: str) -> None:  # many small pieces, few file writes
        chunks.append(text)
        if len(chunks) >= 4096:
            fh.write("".join(chunks))
            chunks.clear()

    _write(doc, 0, write)
    fh.write("".join(chunks))


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


_KEYS: dict[str, str] = {}  # a record's keys repeat in every record: encoded once


def _key(k) -> str:
    if type(k) is str:
        text = _KEYS.get(k)
        if text is None:
            text = _str(k)
            if len(_KEYS) < 4096:  # keys a result brings along are not kept for ever
                _KEYS[k] = text
        return text
    if isinstance(k, str):
        return _str(k)
    if isinstance(k, float):
        return _str(_scalar(k))
    if k is True or k is False or k is None:
        return _str(_scalar(k))
    if isinstance(k, int):
        return _str(int.__repr__(k))
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def _write(o, level: int, write) -> None:
    text = _scalar(o)
    if text is not None:
        write(text)
    elif isinstance(o, (list, tuple)):
        _write_list(o, level, write)
    elif isinstance(o, dict):
        _write_dict(o, level, write)
    elif _is_stream(o):
        _write_list(o, level, write)
    else:
        _write(str(o), level, write)  # default=str


def _is_stream(o) -> bool:
    return hasattr(o, "__next__") and hasattr(o, "__iter__")


def _write_list(items, level: int, write) -> None:
    inner = "\n" + _INDENT * (level + 1)
    first = True
    for item in items:
        write("[" + inner if first else "," + inner)
        first = False
        if isinstance(item, list) and item and all(type(x) is str for x in item):
            deeper = "\n" + _INDENT * (level + 2)
            write("[" + deeper + ("," + deeper).join(map(_str, item)) + inner + "]")
        else:
            _write(item, level + 1, write)
    write("[]" if first else "\n" + _INDENT * level + "]")


def _write_dict(o: dict, level: int, write) -> None:
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
            _write(value, level + 1, write)
    write("\n" + _INDENT * level + "}")


def reference_text(doc) -> str:
    """What the standard library writes (the tests compare the two)."""
    return json.dumps(doc, indent=2, default=str, allow_nan=False)
