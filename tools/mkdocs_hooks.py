"""MkDocs hook: the documentation's generated parts, made from the code at build time.

A page asks for a generated part with a marker, so what it shows can never go
stale against the code (`mkdocs build --strict` runs in the tests):

- `{{ threshold.NAME }}`: one value of hpcai.measure.validity.THRESHOLDS;
- `<!-- generated: thresholds -->`: every threshold with the comment that says why;
- `<!-- generated: schema NAME -->`: a JSON Schema of hpcai/schema/ as tables.

An unknown threshold or schema name stops the build (a page would otherwise
print a stale or empty figure). The CLI reference comes from mkdocs-click.
"""
from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
VALIDITY_SOURCE = ROOT / "hpcai" / "measure" / "validity.py"
SCHEMA_DIR = ROOT / "hpcai" / "schema"
THRESHOLD_MARK = re.compile(r"\{\{\s*threshold\.(\w+)\s*\}\}")
THRESHOLDS_TABLE_MARK = "<!-- generated: thresholds -->"
SCHEMA_MARK = re.compile(r"<!-- generated: schema ([\w-]+) -->")


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "{{" in markdown or "<!-- generated:" in markdown:
        markdown = render_markers(markdown, page.file.src_uri)
    return markdown


def render_markers(markdown: str, where: str = "page") -> str:
    from hpcai.measure.validity import THRESHOLDS

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name not in THRESHOLDS:
            raise PluginError(f"{where}: no threshold {name!r} in hpcai.measure.validity.THRESHOLDS "
                              f"(known: {', '.join(sorted(THRESHOLDS))})")
        return format_value(THRESHOLDS[name])

    markdown = THRESHOLD_MARK.sub(value, markdown)
    if THRESHOLDS_TABLE_MARK in markdown:
        markdown = markdown.replace(THRESHOLDS_TABLE_MARK, thresholds_table(THRESHOLDS))
    return SCHEMA_MARK.sub(lambda m: schema_tables(m.group(1), where), markdown)


def format_value(value) -> str:
    """0.05 stays 0.05 and 10.0 reads 10: as a person writes the figure."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def threshold_comments(source: str) -> dict[str, str]:
    """Each THRESHOLDS key -> the comment lines written above it (a shared comment
    above a pair of keys belongs to both)."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    last = ""
    inside = False
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if not inside:
            inside = tok.type == tokenize.NAME and tok.string == "THRESHOLDS"
            continue
        if tok.type == tokenize.OP and tok.string == "}":
            break
        if tok.type == tokenize.COMMENT:
            pending.append(tok.string.lstrip("#").strip())
        elif tok.type == tokenize.STRING and tok.line.lstrip().startswith(tok.string):
            if pending:
                last = " ".join(pending)
                pending = []
            comments[json.loads(tok.string.replace("'", '"'))] = last
    return comments


def thresholds_table(thresholds: dict) -> str:
    why = threshold_comments(VALIDITY_SOURCE.read_text())
    rows = ["| threshold | value | why this value |", "|---|---|---|"]
    for name, value in thresholds.items():
        text = why.get(name, "").replace("|", "\\|")
        rows.append(f"| `{name}` | {format_value(value)} | {text} |")
    return "\n".join(rows)


def schema_tables(name: str, where: str = "page") -> str:
    path = SCHEMA_DIR / f"{name}.schema.json"
    if not path.is_file():
        known = ", ".join(sorted(p.name.split(".")[0] for p in SCHEMA_DIR.glob("*.schema.json")))
        raise PluginError(f"{where}: no schema {name!r} in hpcai/schema/ (known: {known})")
    schema = json.loads(path.read_text())
    out = [f"`{path.relative_to(ROOT)}` ({schema.get('$id', 'no $id')})", ""]
    if schema.get("description"):
        out += [schema["description"], ""]
    out += field_table(schema, anchor_prefix=name)
    for def_name, sub in schema.get("$defs", {}).items():
        out += ["", f"### `{def_name}` {{ #{name}-def-{def_name} }}", ""]
        if sub.get("description"):
            out += [sub["description"], ""]
        out += field_table(sub, anchor_prefix=name)
    return "\n".join(out)


def field_table(schema: dict, anchor_prefix: str = "") -> list[str]:
    rows = [("(this object)", type_of(schema, anchor_prefix), "", schema.get("description", ""))] \
        if not schema.get("properties") else []
    walk(schema, "", rows, anchor_prefix)
    lines = ["| field | type | required | description |", "|---|---|---|---|"]
    for field, kind, required, text in rows:
        text = " ".join(str(text).split()).replace("|", "\\|")
        lines.append(f"| `{field}` | {kind} | {required} | {text} |")
    return lines


def walk(schema: dict, prefix: str, rows: list, anchor_prefix: str) -> None:
    required = set(schema.get("required", []))
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        rows.append((path, type_of(sub, anchor_prefix), "yes" if key in required else "",
                     sub.get("description", "")))
        if isinstance(sub, dict):
            walk(sub, path + ".", rows, anchor_prefix)
            items = sub.get("items")
            if isinstance(items, dict) and items.get("properties"):
                walk(items, path + "[].", rows, anchor_prefix)


def type_of(sub, anchor_prefix: str) -> str:
    if not isinstance(sub, dict):
        return ""
    if "$ref" in sub:
        ref = sub["$ref"]
        target = ref.rsplit("/", 1)[-1]
        if not ref.startswith("#/$defs/"):
            return f"as `{target}`"  # a field of this schema, described at its own row
        return f"[{target}](#{anchor_prefix}-def-{target})" if anchor_prefix else target
    if "enum" in sub:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in sub["enum"])
    if "const" in sub:
        return f"`{json.dumps(sub['const'])}`"
    kind = sub.get("type")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and isinstance(sub.get("items"), dict):
        kind = f"array of {type_of(sub['items'], anchor_prefix) or 'any'}"
    for combo in ("oneOf", "anyOf"):
        if combo in sub:
            kind = " or ".join(type_of(s, anchor_prefix) or "any" for s in sub[combo])
    return kind or "any"
