"""Text someone else chose (a folder's name, a registry's error, a result's
label) made safe to show: control characters (a newline that forges a line,
an escape code that rewrites the terminal, a bidirectional override that
reorders it) are written as Python escapes, visibly, never sent raw.

The one place this is done: the terminal lines, report.md and the CSVs all
call printable()."""
from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the bidirectional and zero-width format characters.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text) -> str:
    """str(text) with every control or direction-changing character escaped (\\n -> \\x0a)."""
    return _UNSAFE.sub(_escape, str(text))


def is_printable(text: str) -> bool:
    return _UNSAFE.search(text) is None


__all__ = ["printable", "is_printable"]
