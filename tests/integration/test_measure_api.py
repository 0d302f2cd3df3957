"""The hpcai.measure API (issue 30 §2) from a plain Python program: under
`hpcai-launch exec --api` (the launcher's caps and result), and run alone (its
own measuring process, the same result document, no cap). GPUs are FAKES
(tests/fakes, NVML's boundary); the program, the launcher and the result are real.
"""
import json
import subprocess
import sys

import pytest

from conftest import ROOT, assert_valid_result
from processes import popen_options

pytestmark = pytest.mark.slow
PROGRAM = [sys.executable, str(ROOT / "tests" / "data" / "exec" / "api_loop.py")]
CELLS = 400 * 298 * 298  # one measured window's (400 sweeps of the inner 298 x 298)


def check_windows(result: dict) -> None:
    epochs = result["epochs"]
    assert [e["warmup"] for e in epochs] == [True, False, False, False]
    assert [e["units"] for e in epochs] == [20 * 298 * 298] + [CELLS] * 3
    assert [e["steps"] for e in epochs] == [20, 400, 400, 400]
    assert result["work"]["unit"] == "cells" and result["work"]["measured_units"] == 3 * CELLS
    windows = result["workload_metrics"]["exec"]["windows"]
    assert windows["relax"]["windows"] == 3 and windows["warm-up"]["windows"] == 1


def test_windows_reported_under_exec_are_the_runs_epochs_under_its_cap(
        fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    done = node.launch("exec", "--api", "--cap", "350", "-o", str(node.results), "--", *PROGRAM)
    assert done.returncode == 0, done.stderr
    result = node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "complete"
    check_windows(result)
    assert result["power"]["cap"]["requested_w"] == 350
    assert result["power"]["energy_per_unit_j"] is not None
    assert node.limits() == [700.0, 700.0]


def test_run_alone_the_program_writes_a_result_with_the_same_telemetry(
        fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    env = dict(node.env, HPCAI_RESULTS=str(node.results))
    done = subprocess.run(PROGRAM, capture_output=True, text=True, timeout=600, cwd=node.results.parent,
                          **popen_options(env, node.mark))
    assert done.returncode == 0, done.stderr
    assert "relaxed" in done.stdout and "hpcai.measure: result:" in done.stderr
    result = node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "complete" and result["workload"] == "exec"
    check_windows(result)
    # The fake GPUs were sampled (power and energy per window), and no cap was set.
    used = [g for g in result["gpus"] if g.get("used")]
    assert used and result["power"]["energy_per_unit_j"] > 0
    assert result["spec"]["power"]["cap_w"] is None and "launcher" not in result
    assert all(not d["set_log"] for d in node.devices())
    assert result["spec"]["params"]["command"][-1].endswith("api_loop.py")
    run_dir = node.results / result["run_id"]
    assert (run_dir / "measure-events.jsonl").exists()
    assert json.loads((run_dir / "spec.json").read_text())["run_id"] == result["run_id"]
