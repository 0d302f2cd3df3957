"""Resume and the report trust only what they should (issue 25, section 3):
a complete result that failed a validity check is measured again on resume
(kept beside the new one as an earlier attempt), and in a results folder
another user can write, a forged `complete` result is neither skipped by
resume nor counted by the report."""
from __future__ import annotations

import os

import pytest

from hpcai.launcher.report.load import read_runs
from hpcai.launcher.sweep.resume import attempts, completed_slots
from hpcai.measure import validity
from report_docs import make_result, write_result


def sweep_result(repeat: int, **kw) -> dict:
    doc = make_result(cap_w=300.0, repeat=repeat, sweep_id="sweep-a", window_s=60.0, **kw)
    doc["launcher"]["gpu_limits"] = [{"index": g["index"], "requested_w": 300.0,
                                      "enforced_at_start_w": 300.0, "enforced_at_end_w": 300.0}
                                     for g in doc["gpus"]]
    doc["validity"] = validity.evaluate(doc, "launcher")
    return doc


def test_a_complete_result_that_failed_validity_is_measured_again(tmp_path):
    folder = tmp_path / "sweep-a"
    good = sweep_result(0)
    bad = sweep_result(1, epochs=[1000.0, 1000.0, 1000.0, 1000.0, 300.0])  # one stalled epoch
    assert bad["status"] == "complete" and bad["validity"]["failed"] == ["slow_epoch"]
    for doc in (good, bad):
        write_result(folder, doc)
    done = completed_slots(folder, "sweep-a")
    assert good["validity"]["failed"] == []
    assert list(done.values()) == [good["run_id"]]  # the failed one is not done
    tried = {a["run_id"]: a for slot in attempts(folder, "sweep-a").values() for a in slot}
    assert tried[bad["run_id"]] == {"run_id": bad["run_id"], "status": "complete",
                                    "failed_checks": ["slow_epoch"]}


def test_a_result_without_its_launchers_finishing_step_is_measured_again(tmp_path):
    folder = tmp_path / "sweep-a"
    doc = sweep_result(0)
    doc.pop("launcher")  # the launcher was killed after the workload wrote it
    doc["validity"] = validity.evaluate(doc, "workload")
    write_result(folder, doc)
    assert completed_slots(folder, "sweep-a") == {}


def _plant(tmp_path, how: str):
    folder = tmp_path / "results" / "sweep-a"
    path = write_result(folder, sweep_result(0))
    if how == "group-writable sweep folder":
        folder.chmod(0o775)
    elif how == "world-writable run folder":
        path.parent.chmod(0o777)
    elif how == "group-writable result":
        path.chmod(0o664)
    elif how == "another user's result":
        os.chown(path, 54321, 54321)
    elif how == "a link to a result":  # into a folder anyone can write
        elsewhere = tmp_path / "elsewhere" / "run"
        elsewhere.mkdir(parents=True)
        elsewhere.parent.chmod(0o777)
        path.rename(elsewhere / "result.json")
        path.symlink_to(elsewhere / "result.json")
    return folder, path


HOW = ["group-writable sweep folder", "world-writable run folder", "group-writable result",
       "another user's result", "a link to a result"]


@pytest.mark.parametrize("how", HOW)
def test_a_result_others_could_have_forged_is_not_skipped_nor_counted(tmp_path, how):
    if how == "another user's result" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    folder, path = _plant(tmp_path, how)
    assert completed_slots(folder, "sweep-a") == {}
    (run,) = read_runs([folder])[0]
    assert not run.usable
    # A link is refused where the results store reads it (never followed); the rest by trust.
    assert any(p.startswith("not trusted: ") or p == "a symbolic link: not followed"
               for p in run.problems), run.problems


def test_a_result_in_our_own_folders_is_trusted(tmp_path):
    folder, path = _plant(tmp_path, "nothing")
    assert len(completed_slots(folder, "sweep-a")) == 1
    (run,) = read_runs([folder])[0]
    assert run.usable, run.problems
    # A sticky world-writable parent (/tmp style) lets others add, not replace: fine.
    folder.chmod(0o1777)
    assert len(completed_slots(folder, "sweep-a")) == 1
