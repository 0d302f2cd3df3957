"""Values that reach a batch script: refused when they hold control characters,
quoted for whoever reads them (bash, or sbatch for the #SBATCH lines).

A newline in --account or in a site's extra options would end the #SBATCH line
and put the rest in the script as a command run on the allocation; a control
character anywhere else (a path, a comment) does the same or garbles the line.
"""
from __future__ import annotations

import re

from hpcai.errors import UsageError

# C0 controls (newline, carriage return, tab, escape, NUL...), DEL, C1 controls,
# and the Unicode line and paragraph separators some readers treat as newlines.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# What sbatch reads as one word without quotes (src/sbatch/opt.c _get_argument:
# whitespace ends a word, quotes and backslashes are removed, '#' starts a comment).
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def check_value(name: str, value) -> str:
    """value as text, or a one-line UsageError naming the character and where it is."""
    text = str(value)
    found = _CONTROL.search(text)
    if found:
        raise UsageError(f"{name} holds a control character ({found.group()!r} at position "
                         f"{found.start()}): {text!r}",
                         "give it on one line, without newlines or other control characters")
    return text


def sbatch_word(value: str) -> str:
    """One #SBATCH option as sbatch reads it back unchanged: plain when it is plain,
    else in double quotes with '\\' and '"' escaped (sbatch honours the backslash
    inside quotes too)."""
    if _SBATCH_PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
