"""CosmoFlow for real on the CPU through `hpcai-launch` and the host runtime
(issue 18 §6): two gloo processes train the MLPerf HPC model (shrunk by
`tiny`), the result is schema-valid, in samples/s, and its FLOPs per sample
are the independent count's. Nothing here is faked (cpu_node: no GPU library)."""
import json

import pytest

from conftest import assert_valid_result
from cosmoflow_count import analytic_flops

pytestmark = pytest.mark.slow


def run_ok(node, *args):
    done = node.launch("cosmoflow", "--device", "cpu", "--runtime", "host", *args, "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    return node.only_result(), done


def test_cosmoflow_tiny_on_the_cpu(cpu_node, result_schema):
    doc, done = run_ok(cpu_node, "--preset", "tiny")
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["error"] is None
    assert doc["runtime"]["kind"] == "host" and doc["config"]["processes"] == 2
    # 2 processes x batch 2 x 2 steps x 2 measured epochs, counted in samples (cubes)
    assert doc["throughput"]["unit"] == "samples/s" and doc["work"]["unit"] == "samples"
    assert doc["work"]["measured_units"] == 2 * 2 * 2 * 2 and doc["throughput"]["node"] > 0
    config = doc["config"]
    assert config["input_shape"] == [4, 32, 32, 32] and config["architecture"]["filters"] == [8, 16, 32, 64, 128]
    assert config["optimizer"].startswith("SGD") and config["loss"] == "mse"
    # lr: the reference's 0.001 per 64 of global batch (2 x 2 here)
    assert config["learning_rate"] == pytest.approx(0.001 * 4 / 64)
    # FLOPs per sample: the dispatcher's count is the hand count, and achieved TFLOP/s follows.
    assert config["flops_per_unit"] == analytic_flops(32, 0.25, 1)[1]
    tp = doc["throughput"]
    assert tp["achieved_tflops_node"] == pytest.approx(tp["node"] * config["flops_per_unit"] / 1e12)
    assert doc["work"]["first_loss"] is not None and doc["work"]["last_loss"] is not None
    assert "cosmoflow tiny:" in done.stdout and "samples/s" in done.stdout


def test_the_saih_knobs_change_what_is_trained(cpu_node, result_schema):
    doc, _ = run_ok(cpu_node, "--preset", "tiny", "--cube", "64", "--depth-mult", "2", "--width-mult", "0.125",
                    "--nproc", "1", "--epochs", "1", "--steps-per-epoch", "1")
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete"
    arch = doc["config"]["architecture"]
    assert (arch["cube"], arch["convs_per_stage"], arch["filters"][0]) == (64, 2, 4)
    assert doc["config"]["flops_per_unit"] == analytic_flops(64, 0.125, 2)[1]
    assert doc["spec"]["overridden"] == ["cube", "depth_mult", "width_mult"]
    json.dumps(doc)  # plain JSON all through


def test_a_loss_that_turns_nan_gives_a_complete_result_that_fails_loss_finite(cpu_node, tmp_path,
                                                                             result_schema):
    """A learning rate of 1e30 (no option sets one: the spec is edited) makes the loss NaN
    within a step, as bf16 on a loaded CPU did now and then: the result is still
    written, schema-valid, and failed loss_finite, so no report averages it."""
    import subprocess
    import sys

    from conftest import ROOT

    dry = cpu_node.launch("cosmoflow", "--preset", "tiny", "--nproc", "1", "--device", "cpu",
                          "--runtime", "host", "--dry-run", "--json", "-o", str(tmp_path / "r"))
    assert dry.returncode == 0, dry.stderr
    spec = json.loads(dry.stdout.split("\ncommand: ")[0])
    spec["params"]["lr"], spec["output_dir"] = 1e30, str(tmp_path / "out")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "hpcai.workloads", "run", "--spec",
                           str(tmp_path / "spec.json")], env=cpu_node.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "loss nan" in done.stdout + done.stderr
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["work"]["last_loss"] is None
    assert doc["validity"]["verdict"] == "fail" and "loss_finite" in doc["validity"]["failed"]
