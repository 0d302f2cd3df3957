"""In-run `exec --api` sweeps under Slurm, on the real two-node CI cluster
(tests/slurm_fixtures.py): exec runs on one node; the program runs once in ONE
job step and that node's launcher sets its GPUs' cap for each of the program's
measured windows, over the same per-node control channel as the built-in workloads.
GPUs are FAKES (tests/fakes/pynvml.py, one simulated set per node); reported
power is min(draw, cap), so a window measured under the wrong cap shows.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_valid_result
from test_slurm_inrun import NODES, TwoGpuNodes, hpcai, node_docs

pytestmark = pytest.mark.slow
PROGRAM = [sys.executable, str(ROOT / "tests" / "data" / "exec" / "api_segments.py"), "2"]


@pytest.fixture
def busy_nodes(slurm_cluster, tmp_path) -> TwoGpuNodes:
    nodes = TwoGpuNodes(tmp_path, slurm_cluster.env["SLURM_CONF"])
    for node in nodes.nodes.values():  # as a GPU program's would (a 0% GPU fails validity)
        for index in range(2):
            node.update(index, utilization_pct=95.0)
    return nodes


def test_each_nodes_launcher_caps_each_window_of_the_program(busy_nodes, result_schema):
    env = busy_nodes.env
    done = hpcai(env, "exec", "--api", "--cap", "200,300", "--order", "ascending", "--slurm",
                 "--runtime", "host", "--nodes", "1", "--idle-s", "0",
                 "-o", str(busy_nodes.results), "--", *PROGRAM, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "in-run (one step)" in done.stdout
    job_id = done.stdout.split("submitted job ")[1].split(":")[0]
    folder = Path(done.stdout.split("job folder ")[1].split(";")[0])
    waited = hpcai(env, "jobs", "-o", str(busy_nodes.results), "--wait", job_id)
    log = folder / f"slurm-{job_id}.out"
    assert waited.returncode == 0, waited.stderr + log.read_text()[-6000:]
    job = json.loads((folder / "job.json").read_text())
    assert [r["cap_w"] for r in job["runs"]] == [200.0, 300.0]
    assert (folder / "job.sbatch").read_text().count("srun ") == 1  # one step for both caps
    # The node Slurm chose set each window's cap once, in turn, then the snapshot back.
    logs = sorted(busy_nodes.set_log(name) for name in NODES)
    assert logs == [[[], []], [[200.0, 300.0, 700.0]] * 2]
    assert all(busy_nodes.nodes[name].limits() == [700.0, 700.0] for name in NODES)
    for run in job["runs"]:
        docs = node_docs(folder, run["run_id"])
        assert len(docs) == 1
        for doc in docs:
            assert_valid_result(doc, result_schema)
            assert doc["status"] == "complete" and doc["segment"]["cap_w"] == run["cap_w"]
            assert [e["warmup"] for e in doc["epochs"]] == [False]
            assert doc["power"]["mean_power_w"] == pytest.approx(2 * run["cap_w"], rel=0.02)
