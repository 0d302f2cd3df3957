"""Text from results (workload, site and host names, notes, paths) made safe to
put on a page or in a spreadsheet: results come from other people and other
machines, and a name such as `<img src=x onerror=...>` or `=HYPERLINK(...)`
must be shown as text, never run."""
from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV-injection list


def md_text(text: str) -> str:
    """Literal text inside a Markdown table cell or list item: HTML's <, > and &
    as entities (Markdown renderers pass raw HTML through), Markdown's own marks
    backslash-escaped, line breaks as spaces."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", text)


def csv_cell(value):
    """A CSV value a spreadsheet will not run as a formula: text that starts with
    = + - @ tab or CR gets a leading single quote (numbers are left as numbers)."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START):
        return value
    try:
        float(value)  # "-12.5" is a number, not a formula
        return value
    except ValueError:
        return "'" + value


# A value that starts with a formula character, in values joined after a NUL each.
_FORMULA_AFTER_NUL = re.compile("\x00[" + re.escape("".join(FORMULA_START)) + "]")


def csv_row(values: list) -> list:
    """csv_cell of each value. A fleet's report writes millions, nearly all plain: a
    row (or column) of text with no value that starts like a formula is one search
    of the values joined, and comes back as it is."""
    try:
        if _FORMULA_AFTER_NUL.search("\x00" + "\x00".join(values)) is None:
            return values
    except TypeError:  # a value that is not text: each on its own
        pass
    start = FORMULA_START
    return [csv_cell(v) if isinstance(v, str) and v.startswith(start) else v for v in values]
