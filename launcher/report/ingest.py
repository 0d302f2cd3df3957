"""Reading one result file for the results store: safely, fast, and with one
reason when it cannot be used.

A result folder may hold anything (results from elsewhere, a half-written file,
a hostile one), and the launcher often runs as root, so a file is opened
without following a symbolic link, must be a regular file no larger than
MAX_BYTES, must be UTF-8 JSON without duplicate keys, and is checked against
the result schema. Each way to fail is a Run with status "unreadable" or
"invalid" and one problem that says why; nothing here raises for bad input.

Validation is the cost that decides how fast a report over 100,000 results
is: Python's jsonschema takes ~3 ms per result, jsonschema-rs (the same
Draft 2020-12 schema, compiled once) ~0.02 ms. The fast validator decides
valid/invalid; only an invalid file goes through jsonschema again, for the
readable error messages the report has always shown.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from pathlib import Path

from hpcai.printable import printable



def shown_path(path) -> str:
    """As load.shown_path (this module sits below load.py, which reads through it)."""
    return printable(os.fsencode(path).decode("utf-8", "backslashreplace"))


class Kit:
    """What a file is reduced to, given by the reader (report/load.py: its Run and
    _from_doc), so this module and the store stay below it."""

    def __init__(self, run_class, from_doc, sweep_class):
        self.Run, self.from_doc, self.Sweep = run_class, from_doc, sweep_class
        self.fields = [f.name for f in dataclasses.fields(run_class)]

MAX_BYTES = 16 * 1024 * 1024  # a real result is ~20 KB; 16 MiB leaves room for many GPUs
_validator = None


class BadJSON(ValueError):
    """Valid JSON syntax, but not what a result may be (the message says why)."""


def _pairs(pairs: list) -> dict:
    """JSON objects with a key given twice are refused: readers disagree on which wins."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise BadJSON(f"key {shown_text_short(twice)!r} appears twice in one object")
    return doc


def shown_text_short(text: str, limit: int = 60) -> str:
    text = printable(text.encode("utf-8", "backslashreplace").decode("utf-8"))
    return text if len(text) <= limit else text[:limit] + "…"


def parse(data: bytes) -> tuple[object, bool]:
    """(document, whether it holds NaN or Infinity); ValueError with the reason."""
    non_finite = []

    def constant(name: str) -> float:
        non_finite.append(name)
        return float(name.replace("Infinity", "inf"))

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJSON(f"not UTF-8 text (byte {exc.start})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=constant)
    except RecursionError:
        raise BadJSON("nested too deep to be a result") from None
    except BadJSON:
        raise
    except ValueError as exc:
        raise BadJSON(f"not readable JSON: {' '.join(str(exc).split())}") from None
    return doc, bool(non_finite)


def fast_valid(doc: dict) -> bool:
    """The result schema, compiled once by jsonschema-rs."""
    global _validator
    if _validator is None:
        try:
            import jsonschema_rs
        except ImportError:  # without the report extra: jsonschema alone decides, slowly
            return False
        from hpcai.launcher.run.results import schema

        _validator = jsonschema_rs.validator_for(schema())
    try:
        return _validator.is_valid(doc)
    except (ValueError, RecursionError):  # a value it cannot convert: let jsonschema say why
        return False


def schema_errors(doc: dict, non_finite: bool) -> list[str]:
    from hpcai.launcher.run.results import validation_errors

    if not non_finite and fast_valid(doc):
        return []
    try:
        return validation_errors(doc) or ["rejected by the compiled schema"]
    except RecursionError:
        return ["nested too deep to be a result"]


def read_bytes(path: Path) -> bytes:
    """The file's bytes: never through a symbolic link, only a regular file, at most
    MAX_BYTES (checked on the open file, so a swap after the walk changes nothing)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadJSON("not a regular file")
        if info.st_size > MAX_BYTES:
            raise BadJSON(f"{info.st_size:,} bytes, larger than the {MAX_BYTES:,} bytes a result "
                          "may be: not read")
        # os.read, not a buffered file object: a fifth of the time for a 20 KB result.
        parts, size = [], 0
        while size <= MAX_BYTES:
            part = os.read(fd, max(info.st_size + 1 - size, 65536))
            if not part:
                break
            parts.append(part)
            size += len(part)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if len(data) > MAX_BYTES:
            raise BadJSON(f"grew past {MAX_BYTES:,} bytes while read: not read")
        return data
    finally:
        os.close(fd)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def unreadable(kit: Kit, path: Path, why: str, digest: str = ""):
    run = kit.Run(os.fspath(path), shown_path(path.parent.name), "unreadable", [why])
    run.content_hash = digest
    return run


def ingest_bytes(kit: Kit, path: Path, data: bytes):
    """A Run from a file's bytes; never raises for what the bytes hold."""
    digest = content_hash(data)
    try:
        doc, non_finite = parse(data)
    except BadJSON as exc:
        return unreadable(kit, path, str(exc), digest)
    if not isinstance(doc, dict):
        return unreadable(kit, path, "not a JSON object", digest)
    try:
        errors = schema_errors(doc, non_finite)
        run = kit.from_doc(path, doc, errors)
        if errors:  # one reason: the schema's first error (what follows from it adds nothing)
            run.problems = run.problems[:1]
    except RecursionError:
        return unreadable(kit, path, "nested too deep to be a result", digest)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a malformed validity block
        run = kit.Run(os.fspath(path), shown_path(path.parent.name), "invalid",
                      [f"malformed result: {exc!r}"[:300]])
    run.content_hash = digest
    return run


def ingest(kit: Kit, path: Path):
    """A Run from one result file: its reason when it cannot be read."""
    try:
        data = read_bytes(path)
    except BadJSON as exc:
        return unreadable(kit, path, str(exc))
    except OSError as exc:
        if exc.errno == getattr(os, "ELOOP", 40):
            return unreadable(kit, path, "a symbolic link: not followed")
        return unreadable(kit, path, f"cannot be read ({exc.strerror})")
    return ingest_bytes(kit, path, data)
