"""Sweeps for real: `hpcai-launch resnet50 --preset tiny --cap LIST` runs real
PyTorch on the CPU once per cap and repeat; GPU limits and power readings come
from the FAKE pynvml (tests/fakes), the only part that cannot exist here.
Then `hpcai-launch report` on what the sweeps wrote.
"""
import json
import signal
import threading
import time

import pytest

from conftest import assert_valid_result
from hpcai.launcher.report.tables import fmt

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny", "--nproc", "1"]
# Long enough that the power-measured window passes the validity check on window
# length (hpcai/measure/validity.py: a window under 1 s fails, and the report leaves it out),
# and the fixed protocol (sweeps measure adaptively by default): one measured epoch has
# no spread to fail on when a loaded machine makes tiny blocks uneven.
MEASURED = ["--steps-per-epoch", "30", "--ci-target", "off"]


def sweep_dir(node):
    (folder,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    return folder


def summary(node):
    return json.loads((sweep_dir(node) / "sweep.json").read_text())


def test_a_cap_sweep_restores_limits_between_runs_and_lists_every_run(fake_nvidia_node,
                                                                     result_schema, tmp_path):
    node = fake_nvidia_node
    # One run per cap (in-run sweeps: test_inrun_sweep.py).
    done = node.launch(*TINY, *MEASURED, "--device", "cpu", "--cap", "200,300", "--seed", "3",
                       "--idle-s", "0.5", "--no-in-run", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = summary(node)
    order = [r["cap_w"] for r in doc["runs"]]
    assert sorted(order) == [200.0, 300.0] and doc["seed"] == 3 and doc["status"] == "complete"
    # Each cap set, then the snapshot (700 W) put back before the next one.
    for dev in node.devices():
        assert [e["watts"] for e in dev["set_log"]] == [order[0], 700.0, order[1], 700.0]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    assert [r["status"] for r in doc["runs"]] == ["complete", "complete"]
    idle = doc["idle_baseline"]
    assert idle["available"] and idle["total_power_w"] == pytest.approx(1300, rel=0.05)
    results = {}
    for run in doc["runs"]:
        result = json.loads((sweep_dir(node) / run["result"]).read_text())
        assert_valid_result(result, result_schema)
        assert result["spec"]["sweep"]["id"] == doc["sweep_id"]
        assert result["power"]["cap"]["requested_w"] == run["cap_w"]
        results[run["cap_w"]] = result
    assert "sweep" in done.stdout and "summary:" in done.stdout
    # The same command again finds every run complete and runs nothing.
    again = node.launch(*TINY, *MEASURED, "--device", "cpu", "--cap", "200,300", "--seed", "3",
                        "--idle-s", "0.5", "--no-in-run", "-o", str(node.results))
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already complete, skipped") == 2
    assert all(len(d["set_log"]) == 4 for d in node.devices())

    # The report on these results: the table holds each result's own numbers.
    report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = rep["tables"]["throughput-images"]["rows"]
    assert len(rows) == 1
    for cap, col in ((200.0, 2), (300.0, 3)):
        assert rows[0][col].rstrip("†") == fmt(results[cap]["throughput"]["per_gpu"])
        cell = next(c for c in rep["cells"] if c["cap_w"] == cap)
        assert cell["units_per_joule_with_overhead"] == pytest.approx(
            results[cap]["power"]["units_per_joule_with_overhead"])
    assert rep["sweeps"][0]["idle_baseline"]["available"]
    # The fake GPUs want 650 W and report the cap: both caps bound, and the report says so.
    assert all(r["power"]["cap_binding"]["binds"] is True for r in results.values())
    (binding,) = rep["tables"]["cap_binding"]["rows"]
    assert binding[2:5] == ["200 W, 300 W", "–", "–"] and binding[5] == "every cap measured bound"
    for name in ("throughput-resnet50.png", "efficiency-resnet50.png", "clocks-resnet50.png",
                 "power-timeseries.png"):
        assert (tmp_path / "report" / "plots" / name).stat().st_size > 5000


def test_an_interrupted_sweep_resumes_with_only_the_missing_runs(cpu_node, tmp_path):
    """On a node without GPUs: two uncapped repeats, the second interrupted,
    then the same command again; the report averages the two complete ones."""
    node = cpu_node
    # The fixed protocol: adaptive blocks of a few steps on a loaded 2-core machine
    # can spread over 50% and fail the throughput check, which is not this test's subject.
    args = [*TINY, "--repeat", "2", "--steps-per-epoch", "3", "--idle-s", "0",
            "--ci-target", "off", "-o", str(node.results)]
    proc = node.popen(*args)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 300

    def second_run_measuring():
        text = "".join(lines)
        return "sweep run 2/2" in text and "epoch 2/" in text.split("sweep run 2/2", 1)[1]

    while not second_run_measuring():
        assert proc.poll() is None, "".join(lines)
        assert time.time() < deadline, "".join(lines)
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, "".join(lines)
    reader.join(timeout=5)
    first = summary(node)
    assert first["status"] == "interrupted"
    assert [r["status"] for r in first["runs"]] == ["complete", "interrupted"]
    assert first["idle_baseline"]["available"] is False
    folders = {p.name for p in sweep_dir(node).iterdir() if p.is_dir()}
    assert len(folders) == 2

    done = node.launch(*args)
    assert done.returncode == 0, done.stderr
    second = summary(node)
    assert [r["status"] for r in second["runs"]] == ["complete", "complete"]
    assert [r["skipped"] for r in second["runs"]] == [True, False]
    assert second["runs"][0]["run_id"] == first["runs"][0]["run_id"]
    assert sorted(a["status"] for a in second["runs"][1]["attempts"]) == \
        ["complete", "interrupted"]
    new = {p.name for p in sweep_dir(node).iterdir() if p.is_dir()} - folders
    assert new == {second["runs"][1]["run_id"]}  # only the missing run ran again
    assert "already complete, skipped" in done.stdout

    # The report: statistics over the two complete repeats; the interrupted
    # attempt is listed, never averaged; no power on this machine.
    per_gpu = [json.loads((sweep_dir(node) / r["result"]).read_text())["throughput"]["per_gpu"]
               for r in second["runs"]]
    report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    (cell,) = rep["cells"]
    assert cell["device"] == "CPU" and cell["cap_w"] is None and cell["repeats"] == 2
    assert cell["throughput_per_gpu"] == pytest.approx(sum(per_gpu) / 2)
    assert cell["ci_from"] == "repeats" and cell["units_per_joule_with_overhead"] is None
    assert [e["status"] for e in rep["excluded_runs"]] == ["interrupted"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "power was not measured" in md and "| uncapped |" in md
    assert (tmp_path / "report" / "plots" / "throughput-resnet50.png").stat().st_size > 5000
