"""report.json's writer (report/json_stream.py): indented down to the items of each
list, each list item on one line; the same values json.dump(default=str,
allow_nan=False) writes; iterators and rows given as columns written as lists."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hpcai.launcher.report import json_stream
from hpcai.launcher.report.long_tables import StringRows


def _text(doc) -> str:
    buf = io.StringIO()
    json_stream.dump(doc, buf)
    return buf.getvalue()


def _reference(o, level: int = 0) -> str:
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(o, dict):
        if not o:
            return "{}"
        keys = [json.dumps({k: 0})[1:-4] for k in o]  # each key as json.dumps writes it
        return ("{\n" + ",\n".join(f"{inner}{key}: {_reference(v, level + 1)}"
                                   for key, v in zip(keys, o.values())) + f"\n{pad}}}")
    if isinstance(o, (list, tuple)):
        if not o:
            return "[]"
        return ("[\n" + ",\n".join(inner + json.dumps(v, default=str, allow_nan=False) for v in o)
                + f"\n{pad}]")
    return json.dumps(o, default=str, allow_nan=False)


ODD = {
    "empty list": [], "empty dict": {}, "nested": [[], {}, ["x", "é\ud800", "\"q\n\t", "日本"]],
    7: 2, 2.5: None, True: False, None: [1e16, -0.0, 1.5, 10 ** 30, True, 3],
    "path": Path("/x/y"), "tuple": (1, "a"), "rows": [[1, 2], ["a"], [{"k": []}], ["a", 1]],
    "blank": "", "deep": {"a": {"b": {"c": [{"d": None, "e": {"f": [1, {"g": Path("/p")}]}}]}}},
}


def test_odd_documents_are_indented_down_to_one_line_list_items():
    text = _text(ODD)
    assert text == _reference(ODD)
    assert json.loads(text) == json.loads(json.dumps(ODD, default=str))


def test_iterators_are_written_as_lists():
    streamed = {"rows": (row for row in [["a", "b"], [1.5]]), "none": iter([]),
                "inside": [iter([1, 2])]}
    assert _text(streamed) == _reference({"rows": [["a", "b"], [1.5]], "none": [], "inside": [[1, 2]]})


def test_nan_and_bad_keys_are_refused_as_json_refuses_them():
    for bad in ({"x": float("nan")}, {"x": [float("inf")]}, {"x": [{"y": float("nan")}]}):
        with pytest.raises(ValueError):
            _text(bad)
    with pytest.raises(TypeError):
        _text({(1, 2): 3})
    with pytest.raises(TypeError):
        _text({"x": [{(1, 2): 3}]})


@pytest.mark.parametrize("count", [0, 1, 3, 7])
def test_rows_given_as_columns_are_written_as_lists_of_rows(monkeypatch, count):
    monkeypatch.setattr(json_stream, "ROWS_AT_ONCE", 3)  # 7 rows: three passes
    rows = [[f"r{i}", "é\ud800\"q\n", "日本", ""] for i in range(count)]
    columns = [list(column) for column in zip(*rows)] if rows else []
    doc = {"tables": {"t": {"rows": StringRows(columns), "notes": ["n"]}}}
    assert _text(doc) == _reference({"tables": {"t": {"rows": rows, "notes": ["n"]}}})


def test_a_real_report_json_has_one_line_per_cell_and_row(tmp_path):
    from report_docs import crafted_set

    from hpcai.launcher.report import ReportOptions, make_report

    crafted_set(tmp_path / "results")
    make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out", reference=True))
    text = (tmp_path / "out" / "report.json").read_text()
    doc = json.loads(text)
    assert text == _reference(doc) + "\n"
    lines = text.splitlines()
    start = lines.index('  "cells": [')
    assert lines.index("  ],", start) - start - 1 == len(doc["cells"]) > 0
    runs = doc["tables"]["runs"]["rows"]
    assert all(f"        {json.dumps(row)}" in lines or f"        {json.dumps(row)}," in lines
               for row in runs)


def test_a_part_made_beforehand_is_copied_in_at_its_place(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(json_stream, "FLUSH_CHARS", 16)  # the part read back in pieces
    cells = [{"a": 1.5, "b": ["x", "é"]}, {"a": None, "b": []}]
    with tempfile.TemporaryFile() as file:
        json_stream.write_part(["a much longer value, written first"] * 9, 1, file)
        json_stream.write_part(cells, 1, file)  # over it, from the start
        doc = {"kind": "k", "cells": json_stream.Part(file), "after": {"n": 1}}
        assert _text(doc) == _reference({"kind": "k", "cells": cells, "after": {"n": 1}})
