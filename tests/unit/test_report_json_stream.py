"""report.json's writer (report/json_stream.py) writes what json.dump(doc, indent=2,
default=str, allow_nan=False) writes, byte for byte, and streams iterators as lists."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hpcai.launcher.report import json_stream


def _text(doc) -> str:
    buf = io.StringIO()
    json_stream.dump(doc, buf)
    return buf.getvalue()


ODD = {
    "empty list": [], "empty dict": {}, "nested": [[], {}, ["x", "é\ud800", "\"q\n\t", "日本"]],
    7: 2, 2.5: None, True: False, None: [1e16, -0.0, 1.5, 10 ** 30, True, 3],
    "path": Path("/x/y"), "tuple": (1, "a"), "rows": [[1, 2], ["a"], [{"k": []}], ["a", 1]],
    "blank": "", "deep": {"a": {"b": {"c": [{"d": None}]}}},
}


def test_odd_documents_are_written_as_the_standard_library_writes_them():
    assert _text(ODD) == json_stream.reference_text(ODD)


def test_iterators_are_written_as_lists():
    streamed = {"rows": (row for row in [["a", "b"], [1.5]]), "none": iter([])}
    assert _text(streamed) == json_stream.reference_text({"rows": [["a", "b"], [1.5]], "none": []})


def test_nan_and_bad_keys_are_refused_as_json_refuses_them():
    with pytest.raises(ValueError):
        _text({"x": [float("nan")]})
    with pytest.raises(TypeError):
        _text({(1, 2): 3})


def test_a_real_report_json_is_what_the_standard_library_writes(tmp_path):
    from report_docs import crafted_set

    from hpcai.launcher.report import ReportOptions, make_report

    crafted_set(tmp_path / "results")
    make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out", reference=True))
    text = (tmp_path / "out" / "report.json").read_text()
    assert text == json_stream.reference_text(json.loads(text)) + "\n"
