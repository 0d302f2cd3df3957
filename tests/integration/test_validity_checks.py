"""Validity checks failing on purpose, end to end. `hpcai-launch
llama3-8b-inference --preset tiny --device cuda` runs hpcai's real serving path
against the STAND-IN for SGLang (tests/standins: SGLang cannot serve here), so a
run takes seconds; the GPUs are the FAKE pynvml (tests/fakes), playing boards
that overdraw, idle, throttle, lose power samples or have their limit changed
under the run. Then `hpcai-launch check` and `hpcai-launch report`.
"""
import json
import os
import time

import pytest

from conftest import ROOT, FakeNode, assert_valid_result, one_line_error
from fakes import fake_gpu_state as fgs

pytestmark = pytest.mark.slow
STANDINS = ROOT / "tests" / "standins"
SERVE = ["llama3-8b-inference", "--preset", "tiny", "--device", "cuda", "--output-len", "32"]
# 4 in flight, 0.01 s a token: a steady state of about 2 s (over the 1 s window_length fails at).
MEASURED = ["--steps-per-epoch", "24"]


def serving_node(tmp_path, n=2, **device) -> FakeNode:
    """FAKE GPUs busy at 95% (a serving GPU is; the fakes idle at 0% by default)."""
    node = FakeNode(tmp_path, fgs.make_devices(n, "nvidia", **{"utilization_pct": 95.0, **device}))
    node.env["PYTHONPATH"] = os.pathsep.join([str(STANDINS), node.env["PYTHONPATH"]])
    node.env["HPCAI_SGLANG_STANDIN_TOKEN_S"] = "0.01"
    return node


@pytest.fixture
def node(tmp_path):
    node = serving_node(tmp_path)
    yield node
    node.stop_everything()


def run(node, *args):
    done = node.launch(*SERVE, *args, "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    return done


def checks(doc, name):
    return [c for c in doc["validity"]["checks"] if c["name"] == name]


def verdicts(doc, name):
    return {c["subject"]: c["verdict"] for c in checks(doc, name)}


def newest(node):
    path = max(node.result_paths(), key=lambda p: p.stat().st_mtime)
    return path, json.loads(path.read_text())


def test_overdrawing_gpus_fail_power_range_and_the_report_names_the_check(node, result_schema,
                                                                           tmp_path):
    run(node, *MEASURED, "--cap", "300")
    good_path, good = newest(node)
    assert_valid_result(good, result_schema)
    assert good["validity"]["verdict"] != "fail", good["validity"]["checks"]
    assert good["validity"]["evaluated_by"] == "launcher"
    assert set(verdicts(good, "enforced_limit").values()) == {"pass"}
    assert set(verdicts(good, "power_range").values()) == {"pass"}
    # Boards reporting 800 W whatever their limit: above their 700 W maximum x 1.05.
    for i in (0, 1):
        node.update(i, ignores_cap=True, power_draw_w=800.0)
    run(node, *MEASURED, "--cap", "400")
    bad_path, bad = newest(node)
    assert_valid_result(bad, result_schema)
    assert bad["status"] == "complete" and bad["validity"]["verdict"] == "fail"
    assert bad["validity"]["failed"] == ["power_range"]
    assert all(c["value"] == pytest.approx(800.0) for c in checks(bad, "power_range"))

    check = node.launch("check", str(good_path), str(bad_path))
    assert check.returncode == 1, check.stderr
    assert "power_range" in check.stdout and "FAIL" in check.stdout
    assert check.stdout.count("validity FAIL") == 1

    report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    assert "power_range" in report.stdout + report.stderr  # the left-out result, said why
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [c["cap_w"] for c in rep["cells"]] == [300.0]  # the failed run is in no figure
    (excluded,) = rep["excluded_runs"]
    assert excluded["run_id"] == bad["run_id"] and excluded["failed_checks"] == ["power_range"]
    assert "power_range" in excluded["problems"][0]
    table = rep["tables"]["throughput-tokens"]
    (row,) = table["rows"]
    assert row[table["header"].index("400 W")] == "– ✗ power_range"
    assert "✗" not in row[table["header"].index("300 W")]


def test_an_idle_gpu_fails_utilisation(tmp_path):
    node = serving_node(tmp_path, utilization_pct=95.0)
    try:
        node.update(1, utilization_pct=0.0)  # GPU 1 does nothing while the server "serves"
        run(node, *MEASURED)
    finally:
        node.stop_everything()
    _, doc = newest(node)
    assert verdicts(doc, "gpu_utilisation") == {"GPU 0": "pass", "GPU 1": "fail"}
    assert doc["validity"]["failed"] == ["gpu_utilisation"]


def test_a_thermally_throttled_hot_gpu_fails_throttle_and_temperature(node):
    # NVML clocks-event bits 0x40 (HW thermal slowdown) and 0x4 (SW power cap), 97 °C.
    node.update(0, throttle_reasons=0x40 | 0x4, temperature_c=97.0)
    run(node, *MEASURED)
    _, doc = newest(node)
    assert verdicts(doc, "throttle") == {"GPU 0": "fail", "GPU 1": "pass"}
    assert verdicts(doc, "temperature") == {"GPU 0": "fail", "GPU 1": "pass"}
    assert "hw_thermal" in checks(doc, "throttle")[0]["note"]
    assert set(doc["validity"]["failed"]) == {"throttle", "temperature"}


def test_lost_power_samples_fail_sample_coverage(node):
    # Nine in ten power queries fail (both NVML paths: the instant field, the average).
    node.update(1, error_fraction={"field_values": 0.9, "power_average": 0.9})
    run(node, *MEASURED)
    _, doc = newest(node)
    (coverage,) = checks(doc, "sample_coverage")
    assert coverage["verdict"] == "fail" and coverage["value"] < 0.5, coverage
    assert "sample_coverage" in doc["validity"]["failed"]


def test_a_too_short_window_fails_window_length(node):
    run(node, "--steps-per-epoch", "4")  # one wave of 4: in flight together for ~0.3 s
    path, doc = newest(node)
    (window,) = checks(doc, "window_length")
    assert window["verdict"] == "fail" and window["value"] < 1.0, window
    check = node.launch("check", str(path.parent))
    assert check.returncode == 1 and "window_length" in check.stdout


def test_a_limit_changed_under_the_run_fails_enforced_limit(node):
    proc = node.popen(*SERVE, "--steps-per-epoch", "160", "--cap", "300", "-o", str(node.results))
    deadline = time.monotonic() + 120
    # Once the measured load runs, a site agent lowers the limit in force to 250 W.
    while not any((p.parent / "sglang-bench.log").is_file() for p in node.result_paths()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    node.update(0, enforced_limit_w=250.0)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    _, doc = newest(node)
    assert verdicts(doc, "enforced_limit") == {"GPU 0": "fail", "GPU 1": "pass"}
    assert doc["launcher"]["gpu_limits"][0]["enforced_at_end_w"] == 250.0
    assert "enforced_limit" in doc["validity"]["failed"]


def test_check_refuses_what_is_not_a_result_in_one_line(tmp_path, cpu_node):
    not_json = tmp_path / "notes.txt"
    not_json.write_text("hello\n")
    other = tmp_path / "sweep.json"
    other.write_text(json.dumps({"kind": "hpcai.sweep"}))
    empty = tmp_path / "empty-run"
    empty.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    one_line_error(cpu_node.launch("check", str(not_json)), "is not an hpcai result", "not JSON")
    one_line_error(cpu_node.launch("check", str(other)), "is not an hpcai result", "'hpcai.sweep'")
    one_line_error(cpu_node.launch("check", str(empty)), "holds no result.json")
    one_line_error(cpu_node.launch("check", str(tmp_path / "missing.json")), "does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
