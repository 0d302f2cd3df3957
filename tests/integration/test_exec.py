"""`hpcai-launch exec` (issue 30): programs hpcai did not write, measured as
workloads on the FAKE GPUs (tests/fakes: NVML's boundary; the programs, the
launcher, the caps' set-and-restore and the result are real).
"""
import json
import sys

import pytest

from conftest import ROOT, assert_valid_result, one_line_error

pytestmark = pytest.mark.slow
DATA = ROOT / "tests" / "data" / "exec"
# A couple of seconds on an idle 2-core machine: the window holds many 100 ms samples.
JACOBI = [sys.executable, str(DATA / "jacobi.py"), "160", "1e-5"]
# 1848 sweeps to converge, a progress line every 50: a known count of lines.
JACOBI_1848 = [sys.executable, str(DATA / "jacobi.py"), "96", "1e-4"]


def test_a_numerical_kernel_under_a_cap_is_timed_to_solution(fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    done = node.launch("exec", "--cap", "300", "-o", str(node.results), "--", *JACOBI)
    assert done.returncode == 0, done.stderr
    result = node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "complete" and result["workload"] == "exec"
    assert result["spec"]["params"]["command"] == JACOBI
    # One solution: the whole command, its time the measured window.
    assert result["work"] == {**result["work"], "unit": "solutions", "measured_units": 1}
    metrics = result["workload_metrics"]["exec"]
    assert metrics["exit_code"] == 0 and metrics["count"] == "solution"
    seconds = result["work"]["measured_seconds"]
    assert metrics["time_to_solution_s"] == seconds > 0
    assert result["throughput"]["node"] == pytest.approx(1 / seconds)
    # Energy to solution from the fake GPUs' counters, and EDP = energy x time.
    energy = result["power"]["energy_per_unit_j"]
    assert energy is not None and energy > 0 and metrics["energy_to_solution_j"] == energy
    assert metrics["edp_js"] == pytest.approx(energy * seconds)
    assert result["power"]["cap"]["requested_w"] == 300
    # The program's own output is in the run's log; the cap came back.
    log = (node.results / result["run_id"] / "workload.log").read_text()
    assert "converged after" in log
    assert node.limits() == [700.0, 700.0]
    assert "time to solution" in done.stdout


def test_units_counted_from_the_output_with_the_lines_time_stamps(cpu_node, result_schema):
    done = cpu_node.launch("exec", "--units", "sweeps", "--progress-regex",
                           r"sweeps done: (?P<total>\d+)", "-o", str(cpu_node.results),
                           "--", *JACOBI_1848)
    assert done.returncode == 0, done.stderr
    result = cpu_node.only_result()
    assert_valid_result(result, result_schema)
    assert result["throughput"]["unit"] == "sweeps/s" and result["work"]["unit"] == "sweeps"
    epochs = result["epochs"]
    # 1848 sweeps to converge: a line every 50, 36 lines; the first interval is warm-up.
    assert len(epochs) == 36 and epochs[0]["warmup"] and not epochs[1]["warmup"]
    assert [e["units"] for e in epochs] == [50] * 36
    assert result["work"]["measured_units"] == 35 * 50
    # Each interval runs from one line's arrival to the next one's.
    assert all(a["end"] == b["start"] for a, b in zip(epochs, epochs[1:]))
    assert result["workload_metrics"]["exec"]["matched_lines"] == 36


def test_a_program_failing_midway_is_a_failed_run_and_the_cap_comes_back(
        fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    done = node.launch("exec", "--cap", "250", "-o", str(node.results), "--",
                       sys.executable, str(DATA / "fails_midway.py"))
    assert done.returncode != 0
    assert "the command exited with code 1" in done.stderr
    result = node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "failed"
    assert "exited with code 1" in result["error"]["message"]
    assert result["workload_metrics"]["exec"]["exit_code"] == 1
    log = (node.results / result["run_id"] / "workload.log").read_text()
    assert "the solver diverged at step 3" in log
    # The cap was set for the run, and restored after it.
    set_log = [entry["watts"] for entry in node.devices()[0]["set_log"]]
    assert set_log[0] == 250 and node.limits() == [700.0, 700.0]


@pytest.mark.parametrize("args, fragments", [
    ([], ["no command given", "after `--`"]),
    (["--", "no-such-program-hpcai"], ["'no-such-program-hpcai' was not found on PATH"]),
    (["--", "./no/such/file"], ["'./no/such/file' does not exist"]),
    (["--progress-regex", r"step \d+", "--", "true"], ["has no group naming what it counts"]),
    (["--progress-regex", "(?P<units>", "--", "true"], ["is not a valid regular expression"]),
    (["--units", "tokens", "--", "true"], ["--units tokens has no way to count them"]),
])
def test_bad_input_is_one_line_and_nothing_changes(fake_nvidia_node, args, fragments):
    node = fake_nvidia_node
    done = node.launch("exec", "--cap", "300", "-o", str(node.results), *args)
    one_line_error(done, *fragments)
    assert node.limits() == [700.0, 700.0]
    assert all(not d["set_log"] for d in node.devices())
    assert not node.results.exists() and not node.journal_files()


def test_a_cap_sweep_runs_one_process_per_cap(fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    for index in range(2):  # busy, as a GPU program's GPUs would be (else gpu_utilisation fails)
        node.update(index, utilization_pct=95.0)
    done = node.launch("exec", "--cap", "300,400", "--idle-s", "0", "-o", str(node.results),
                       "--", *JACOBI)
    assert done.returncode == 0, done.stderr
    paths = sorted(node.results.rglob("result.json"))
    results = [json.loads(p.read_text()) for p in paths]
    assert sorted(r["power"]["cap"]["requested_w"] for r in results) == [300, 400]
    for result in results:
        assert_valid_result(result, result_schema)
        assert result["status"] == "complete" and result["work"]["measured_units"] == 1
    assert node.limits() == [700.0, 700.0]


def test_sigterm_stops_the_command_and_its_children_and_restores_the_cap(
        fake_nvidia_node, tmp_path, result_schema):
    import signal
    import time

    from conftest import pid_alive

    node = fake_nvidia_node
    pids = tmp_path / "pids"
    proc = node.popen("exec", "--cap", "300", "-o", str(node.results), "--",
                      sys.executable, str(DATA / "sleeper.py"), str(pids))
    deadline = time.time() + 600
    while not pids.exists():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
        time.sleep(0.1)
    program, child = map(int, pids.read_text().split())
    assert node.limits() == [300.0, 300.0]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    result = node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "interrupted" and "SIGTERM" in result["error"]["message"]
    # The command's whole process group is gone, and the cap came back.
    assert not pid_alive(program) and not pid_alive(child)
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
