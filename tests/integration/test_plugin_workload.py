"""A workload outside this repository (issue 24 §4): examples/plugin-workload,
installed into a scratch target as a centre would install its own package, is
found through the `hpcai.workloads` entry-point group; it lists, runs on the
CPU and measures an in-run cap sweep on the fake GPUs, with nothing in hpcai
edited for it."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, assert_valid_result
from measured_runs import assert_measured, finished

# make test runs a module on one pytest-xdist worker (--dist loadfile): its module fixture installs the plugin once.
pytestmark = pytest.mark.slow
TINY = ["mlp-example", "--preset", "tiny", "--nproc", "1", "--device", "cpu"]


@pytest.fixture(scope="module")
def plugin_target(tmp_path_factory) -> str:
    """The example installed (no network, no dependencies) into a scratch folder;
    built from a copy, so the source tree gets no build/ or egg-info."""
    scratch = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(ROOT / "examples" / "plugin-workload", scratch / "source")
    target = scratch / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, text=True)
    return str(target)


def with_plugin(node, target: str) -> dict:
    env = dict(node.env)
    env["PYTHONPATH"] = os.pathsep.join([target, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_the_installed_plugin_is_listed_and_a_tiny_cpu_run_writes_a_valid_result(
        cpu_node, plugin_target, result_schema):
    env = with_plugin(cpu_node, plugin_target)
    listed = cpu_node.launch("list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "mlp-example  (samples/s)" in listed.stdout and "tiny" in listed.stdout
    # Not installed, not listed: the workload comes from the package alone.
    assert "mlp-example" not in cpu_node.launch("list").stdout
    # Its own options come from its params fields (MlpParams.hidden, .layers).
    helped = cpu_node.launch("mlp-example", "--help", env=env)
    assert "--hidden" in helped.stdout and "--layers" in helped.stdout
    done = cpu_node.launch(*TINY, "--hidden", "32", "-o", str(cpu_node.results), env=env)
    assert done.returncode == 0, done.stderr
    result = cpu_node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "complete" and result["spec"]["workload"] == "mlp-example"
    assert result["spec"]["params"] == {"batch_size": 16, "features": 32, "hidden": 32, "layers": 2}
    assert result["throughput"]["unit"] == "samples/s" and result["throughput"]["node"] > 0
    # Its FLOP model's count: 2 x (32x32 + 32x32 + 32x10) forward, 3x that to train.
    assert result["config"]["flops_per_unit"] == 3 * 2 * (32 * 32 + 32 * 32 + 32 * 10)


def test_the_plugin_measures_a_two_cap_in_run_sweep_on_the_fake_gpus(
        fake_nvidia_node, plugin_target, result_schema):
    node = fake_nvidia_node
    env = with_plugin(node, plugin_target)
    done = node.launch(*TINY, "--cap", "200,300", "--seed", "1", "--max-window-s", "1.5",
                       "--idle-s", "0", "-o", str(node.results), env=env)
    failed = assert_measured(done)  # exit 0, or 3 for what a loaded machine fails
    (sweep,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    summary = json.loads((sweep / "sweep.json").read_text())
    assert summary["in_run"] is True
    assert len(summary["runs"]) == 2 and finished([r["status"] for r in summary["runs"]], failed)
    results = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert sorted(r["spec"]["power"]["cap_w"] for r in results) == [200.0, 300.0]
    for result in results:
        assert_valid_result(result, result_schema)
        assert result["segment"]["in_run"] is True
        cap = result["spec"]["power"]["cap_w"]
        assert result["power"]["mean_power_w"] == pytest.approx(2 * min(650.0, cap), rel=0.02)
    # The caps set in turn, then the snapshot (700 W) restored.
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
