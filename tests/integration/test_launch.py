"""`hpcai-launch resnet50` for real: torchrun, two gloo processes, real
PyTorch on the CPU. GPU power limits and readings come from the FAKE
pynvml (tests/fakes), the only part that cannot exist without a GPU.
"""
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, assert_valid_result

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny"]


def test_tiny_run_on_cpu_gives_a_valid_complete_result(cpu_node, result_schema):
    done = cpu_node.launch(*TINY, "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    doc = cpu_node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["error"] is None
    assert doc["config"]["processes"] == 2 and doc["config"]["backend"] == "gloo"
    assert len(doc["ranks"]) == 2 and all(r["throughput"] > 0 for r in doc["ranks"])
    assert doc["protocol"]["measured_epochs_completed"] == doc["spec"]["protocol"]["epochs"]
    assert [e["warmup"] for e in doc["epochs"]] == [True, False, False]
    # Images counted: 2 processes x batch 4 x 2 steps x 2 measured epochs.
    assert doc["work"]["measured_units"] == 2 * 4 * 2 * 2
    assert doc["throughput"]["node"] == pytest.approx(2 * doc["throughput"]["per_gpu"])
    assert doc["work"]["first_loss"] > 0 and doc["work"]["last_loss"] > 0
    assert doc["power"]["available"] is False and "powercap" in doc["power"]["reason"]
    assert "images/s (node)" in done.stdout and "result:" in done.stdout


def test_capped_run_sets_reads_back_and_restores_the_limit(fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    before = node.limits()
    done = node.launch(*TINY, "--device", "cpu", "--cap", "300", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    assert node.limits() == before  # restored
    assert node.journal_files() == []
    for dev in node.devices():  # set to 300, then back to the snapshot
        assert [e["watts"] for e in dev["set_log"]] == [300.0, before[0]]
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["power"]["available"] and doc["power"]["source"] == "nvidia"
    assert doc["power"]["energy_source"] == "counter"
    assert doc["power"]["cap"] == {"requested_w": 300.0, "tolerance_frac": 0.05,
                                   "statistic": "median", "enforced": True}
    for gpu in doc["gpus"]:
        assert gpu["limits"]["requested_w"] == 300.0 and gpu["limits"]["applied_w"] == 300.0
        assert gpu["limits"]["min_w"] == 200.0 and gpu["cap_held"] is True
        assert gpu["power_w"]["max"] <= 300.0  # the fake draws min(draw, limit)
        assert gpu["power_limit_w"] == pytest.approx(300.0)
    # Energy per image and images per joule agree, with and without overhead.
    p = doc["power"]
    assert p["energy_per_unit_j"] * p["units_per_joule"] == pytest.approx(1.0)
    assert p["units_per_joule_with_overhead"] < p["units_per_joule"]
    samples = (node.results / doc["run_id"] / "samples.csv").read_text().splitlines()
    assert samples[0].startswith("t,source,power_w") and len(samples) > 2


def test_a_cap_the_gpu_does_not_enforce_is_marked(fake_nvidia_node):
    node = fake_nvidia_node
    node.update(0, ignores_cap=True)
    node.update(1, ignores_cap=True)
    done = node.launch(*TINY, "--device", "cpu", "--cap", "300", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert doc["power"]["cap"]["enforced"] is False
    assert all(g["cap_held"] is False for g in doc["gpus"])
    assert "NOT enforced" in done.stdout


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 128 + 15), (signal.SIGINT, 130),
                                      (signal.SIGHUP, 128 + 1)])
def test_signal_mid_run_restores_limits_and_marks_the_result(fake_nvidia_node, sig, code,
                                                              result_schema):
    node = fake_nvidia_node
    before = node.limits()
    proc = node.popen(*TINY, "--device", "cpu", "--cap", "250", "--epochs", "500",
                      "-o", str(node.results))
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 120
    while not any("epoch 2/" in line for line in lines):
        assert proc.poll() is None, "".join(lines)
        assert time.time() < deadline, "".join(lines)
        time.sleep(0.2)
    assert node.limits() == [250.0, 250.0]  # the cap is in force mid-run
    proc.send_signal(sig)
    assert proc.wait(timeout=90) == code, "".join(lines)
    reader.join(timeout=5)
    assert node.limits() == before
    assert node.journal_files() == []
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "interrupted"
    assert 1 <= doc["protocol"]["epochs_completed"] < 501
    assert "restored" in "".join(lines)


def test_killed_launcher_leaves_a_journal_that_power_restore_replays(fake_nvidia_node):
    node = fake_nvidia_node
    proc = node.popen(*TINY, "--device", "cpu", "--cap", "350", "--epochs", "500",
                      "-o", str(node.results))
    deadline = time.time() + 120

    def workload_journalled():
        journals = node.journal_files()
        return journals and "workload" in json.loads(journals[0].read_text())

    # Kill once the workload is started and journalled (the cap is set just before:
    # a kill in between leaves no workload, a case test_run_safety_e2e covers).
    while node.limits() != [350.0, 350.0] or not workload_journalled():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.2)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(timeout=30)
    assert node.journal_files(), "the journal must survive a SIGKILL"
    # Its workload notices (the lifeline) and stops; restore refuses until then.
    from hpcai.launcher.power import workload_procs

    workload = json.loads(node.journal_files()[0].read_text())["workload"]
    while workload_procs.find(workload):
        assert time.time() < deadline + 60, "the workload outlived its launcher"
        time.sleep(0.2)
    refused = node.launch(*TINY, "--device", "cpu", "--cap", "300", "-o", str(node.results))
    assert refused.returncode != 0 and "power restore" in refused.stderr
    done = node.launch("power", "restore")
    assert done.returncode == 0, done.stderr
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []


def test_entrypoint_runs_a_spec_in_one_process(cpu_node, tmp_path, result_schema):
    dry = cpu_node.launch(*TINY, "--nproc", "1", "--dry-run", "--json", "-o", str(tmp_path / "r"))
    assert dry.returncode == 0, dry.stderr
    spec = json.loads(dry.stdout.split("\ncommand: ")[0])
    assert "torch.distributed.run" not in dry.stdout  # one process: no torchrun
    assert not (tmp_path / "r").exists()  # a dry run writes nothing
    spec["output_dir"] = str(tmp_path / "out")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "hpcai.workloads", "run", "--spec",
                           str(tmp_path / "spec.json")], env=cpu_node.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["config"]["processes"] == 1
    assert doc["config"]["backend"] is None
