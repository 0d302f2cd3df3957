"""In-run sweeps: processes that outlived the one workload process are found as its
`with WorkloadProcess` block ends, after the last segment's result is filed;
inrun.add_outlived puts them in that result (launcher.outlived_processes, as a
single run's), checked against the schema, written atomically, never through a link."""
from __future__ import annotations

import copy
import json

from conftest import assert_valid_result
from hpcai.launcher.run import results
from hpcai.launcher.sweep.inrun import add_outlived
from report_docs import make_result

OUTLIVED = [{"pid": 4242, "command": "sleep 300"}]


def _filed(tmp_path, doc=None):
    doc = doc or make_result(cap_w=250.0)
    assert results.validation_errors(doc) == []
    path = tmp_path / "seg" / "result.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    return path, doc


def test_the_outlived_processes_go_into_the_last_segments_result(tmp_path, capsys, result_schema):
    path, doc = _filed(tmp_path)
    assert add_outlived((path, copy.deepcopy(doc)), OUTLIVED) is None
    written = json.loads(path.read_text())
    assert_valid_result(written, result_schema)
    assert written["launcher"]["outlived_processes"] == OUTLIVED
    del written["launcher"]["outlived_processes"]
    assert written == doc  # nothing else changed
    assert f"1 process(es) outlived the in-run process: recorded in the last segment's result, {path}" \
        in capsys.readouterr().err


def test_processes_already_recorded_are_kept(tmp_path):
    doc = make_result(cap_w=250.0)
    doc["launcher"]["outlived_processes"] = [{"pid": 7, "command": "python worker.py"}]
    path, doc = _filed(tmp_path, doc)
    add_outlived((path, doc), OUTLIVED)
    assert [e["pid"] for e in json.loads(path.read_text())["launcher"]["outlived_processes"]] == [7, 4242]


def test_an_entry_the_schema_refuses_leaves_the_result_as_it_was(tmp_path, capsys):
    path, doc = _filed(tmp_path)
    before = path.read_bytes()
    add_outlived((path, doc), [{"pid": "4242"}])
    assert path.read_bytes() == before
    assert "were not added" in capsys.readouterr().err


def test_a_link_planted_at_the_result_is_replaced_never_written_through(tmp_path):
    path, doc = _filed(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    path.unlink()
    path.symlink_to(elsewhere)
    add_outlived((path, doc), OUTLIVED)
    assert elsewhere.read_text() == "{}"
    assert not path.is_symlink()
    assert json.loads(path.read_text())["launcher"]["outlived_processes"] == OUTLIVED


def test_no_segment_filed_says_so_and_writes_nothing(tmp_path, capsys):
    assert add_outlived(None, OUTLIVED) is None
    assert list(tmp_path.iterdir()) == []
    assert "no segment's result was filed" in capsys.readouterr().err


def test_a_result_that_cannot_be_written_is_an_output_error(tmp_path):
    """Its folder gone and a plain file in its place (what root, too, cannot write in)."""
    from hpcai.launcher.run.output_check import OutputError

    path, doc = _filed(tmp_path)
    path.unlink()
    path.parent.rmdir()
    path.parent.write_text("")
    error = add_outlived((path, doc), OUTLIVED)
    assert isinstance(error, OutputError) and "cannot write the last segment's result" in error.one_line()
    assert path.parent.read_text() == ""
