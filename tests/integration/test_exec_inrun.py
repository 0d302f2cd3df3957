"""In-run sweeps of any program (issue 30): `hpcai-launch exec --api --cap A,B`
runs the program ONCE; each of its measured hpcai.measure windows is a segment
at the sweep's next cap, set over the control channel the built-in in-run
workloads use, and becomes its own result. GPUs are FAKES (tests/fakes, NVML's
boundary; reported power is min(draw, cap), so a window measured under the
wrong cap shows in its power); the program, the launcher and the caps' set and
restore are real.
"""
import json
import os
import signal
import sys

import pytest

from conftest import ROOT, assert_valid_result

pytestmark = pytest.mark.slow
PROGRAM = [sys.executable, str(ROOT / "tests" / "data" / "exec" / "api_segments.py")]
CELLS = 198 * 198  # one sweep's (the program counts every sweep it did)


def sweep_dir(node):
    (folder,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    return folder


def segment_results(node) -> list[dict]:
    docs = [json.loads(p.read_text()) for p in sweep_dir(node).glob("*/result.json")]
    return sorted(docs, key=lambda d: d["segment"]["index"])


def busy(node):
    """The fake GPUs report 95% utilisation, as a GPU program's would (the
    program here computes on the CPU; a 0% GPU fails the validity check)."""
    for index in range(len(node.devices())):
        node.update(index, utilization_pct=95.0)
    return node


def set_log(node) -> list[float]:
    return [e["watts"] for e in node.devices()[0]["set_log"]]


def test_each_measured_window_is_a_segment_at_the_next_cap_in_one_process(
        fake_nvidia_node, result_schema):
    node = busy(fake_nvidia_node)
    args = ["exec", "--api", "--cap", "200,300", "--order", "ascending", "-o",
            str(node.results), "--", *PROGRAM, "2"]
    done = node.launch(*args)
    assert done.returncode == 0, done.stderr
    summary = json.loads((sweep_dir(node) / "sweep.json").read_text())
    assert summary["in_run"] is True
    assert [(r["cap_w"], r["status"]) for r in summary["runs"]] == [(200, "complete"),
                                                                   (300, "complete")]
    # One process: one process folder, the program started once.
    (process,) = [p for p in sweep_dir(node).iterdir() if p.name.endswith("-inrun")]
    assert (process / "command.log").exists() or (process / "workload.log").exists()
    log = (process / "workload.log").read_text()
    assert log.count("relaxed") == 1
    # Each cap set once, in turn, and the snapshot back at the end.
    assert set_log(node) == [200.0, 300.0, 700.0]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    results = segment_results(node)
    assert [r["segment"]["cap_w"] for r in results] == [200, 300]
    for k, (result, cap) in enumerate(zip(results, (200, 300))):
        assert_valid_result(result, result_schema)
        assert result["status"] == "complete" and result["workload"] == "exec"
        seg = result["segment"]
        assert seg["process_run_id"] == process.name and seg["index"] == k
        assert seg["enforced_w"] == {"0": cap, "1": cap}
        # The segment is exactly the program's k-th measured window, under its cap.
        (epoch,) = result["epochs"]
        assert not epoch["warmup"] and epoch["steps"] >= 50 and epoch["steps"] % 50 == 0
        assert epoch["units"] == epoch["steps"] * CELLS and epoch["duration_s"] >= 1.5
        assert result["work"]["unit"] == "cells"
        assert result["work"]["measured_units"] == epoch["units"]
        assert result["spec"]["power"]["cap_w"] == cap
        limits = result["launcher"]["gpu_limits"][0]
        assert limits["enforced_at_start_w"] == limits["enforced_at_end_w"] == cap
        # The fake draws min(650 W, cap) per GPU: the window saw its own cap.
        assert result["power"]["mean_power_w"] == pytest.approx(2 * cap, rel=0.02)
        assert result["measurement"]["window"]["mode"] == "fixed"
        assert result["workload_metrics"]["exec"]["windows"] == {
            "relax": {"windows": 1, "units": epoch["units"],
                      "seconds": pytest.approx(result["epochs"][0]["duration_s"])}}
    record = json.loads((process / "process.json").read_text())
    assert record["status"] == "complete"
    assert [e["warmup"] for e in record["epochs"]] == [True, False, False]

    # Resume: every cap complete, nothing set, the program not run again.
    again = node.launch(*args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already complete, skipped") == 2
    assert set_log(node) == [200.0, 300.0, 700.0]


def test_fewer_windows_than_caps_fails_clearly_and_restores_the_cap(fake_nvidia_node,
                                                                      result_schema):
    node = busy(fake_nvidia_node)
    args = ["exec", "--api", "--cap", "200,300", "--order", "ascending", "-o",
            str(node.results), "--", *PROGRAM]
    done = node.launch(*args, "1")
    assert done.returncode != 0
    assert "the program measured 1 window(s) and the sweep has 2 cap(s)" in done.stderr
    # The window it measured is a complete result; the cap came back.
    (result,) = segment_results(node)
    assert_valid_result(result, result_schema)
    assert result["status"] == "complete" and result["segment"]["cap_w"] == 200
    assert set_log(node) == [200.0, 700.0] and node.limits() == [700.0, 700.0]
    summary = json.loads((sweep_dir(node) / "sweep.json").read_text())
    assert [r["status"] for r in summary["runs"]][0] == "complete"
    assert [r["status"] for r in summary["runs"]][1] != "complete"

    # The same command again measures only the missing cap: the program's one
    # measured window is now the 300 W segment; 200 W is not set again.
    again = node.launch(*args, "1")
    assert again.returncode == 0, again.stderr
    assert "already complete, skipped" in again.stdout
    assert set_log(node) == [200.0, 700.0, 300.0, 700.0]
    # Two processes, each with its segment 0: the second one's at the missing cap.
    results = sorted(segment_results(node), key=lambda r: r["segment"]["cap_w"])
    assert [(r["segment"]["cap_w"], r["status"]) for r in results] == [(200, "complete"),
                                                                      (300, "complete")]
    assert results[0]["segment"]["process_run_id"] != results[1]["segment"]["process_run_id"]
    assert results[1]["spec"]["power"]["cap_w"] == 300


def test_windows_after_the_last_cap_run_unmeasured(fake_nvidia_node):
    node = busy(fake_nvidia_node)
    done = node.launch("exec", "--api", "--cap", "200,300", "--order", "ascending", "-o",
                       str(node.results), "--", *PROGRAM, "3")
    assert done.returncode == 0, done.stderr
    assert "window 3: every cap of the sweep is measured; this window runs unmeasured" \
        in done.stderr
    assert [r["segment"]["cap_w"] for r in segment_results(node)] == [200, 300]
    (process,) = [p for p in sweep_dir(node).iterdir() if p.name.endswith("-inrun")]
    record = json.loads((process / "process.json").read_text())
    # The third window ran at the last cap, recorded but counted in no segment.
    assert [e["warmup"] for e in record["epochs"]] == [True, False, False, True]
    assert set_log(node) == [200.0, 300.0, 700.0]


def test_a_program_crashing_in_a_window_fails_that_segment_and_restores_the_cap(
        fake_nvidia_node, result_schema):
    node = busy(fake_nvidia_node)
    done = node.launch("exec", "--api", "--cap", "200,300", "--order", "ascending", "-o",
                       str(node.results), "--", *PROGRAM, "2", "fail")
    assert done.returncode != 0
    first, second = segment_results(node)
    for result in (first, second):
        assert_valid_result(result, result_schema)
    assert first["status"] == "complete" and first["segment"]["cap_w"] == 200
    # The window it died in is a failed result at its own cap, never complete.
    assert second["status"] == "failed" and second["segment"]["cap_w"] == 300
    assert "exited with code 1" in second["error"]["message"]
    assert set_log(node) == [200.0, 300.0, 700.0] and node.limits() == [700.0, 700.0]


def test_a_process_that_outlived_the_program_is_in_the_last_segments_result(
        fake_nvidia_node, result_schema, tmp_path):
    """Found as the in-run process's block ends, after its last segment was filed:
    stopped before the caps came back, and recorded in that segment's result."""
    from conftest import pid_alive

    node = busy(fake_nvidia_node)
    pidfile = tmp_path / "daemon.pid"
    done = node.launch("exec", "--api", "--cap", "200,300", "--order", "ascending", "-o",
                       str(node.results), "--", *PROGRAM, "2", "daemon", str(pidfile))
    daemon = int(pidfile.read_text())
    try:
        assert done.returncode == 0, done.stderr
        assert not pid_alive(daemon)
        first, last = segment_results(node)
        for result in (first, last):
            assert_valid_result(result, result_schema)
            assert result["status"] == "complete"
        assert "outlived_processes" not in first["launcher"]
        outlived = last["launcher"]["outlived_processes"]
        assert [e["pid"] for e in outlived] == [daemon] and outlived[0]["command"] == "sleep 300"
        assert "outlived the in-run process: recorded in the last segment's result" in done.stderr
        assert set_log(node) == [200.0, 300.0, 700.0] and node.limits() == [700.0, 700.0]
    finally:
        if pid_alive(daemon):
            os.kill(daemon, signal.SIGKILL)
