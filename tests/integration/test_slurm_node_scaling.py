"""`--vary nodes=1,2 --scaling strong|weak` on the real two-node CI Slurm
(tests/slurm_fixtures.py): one allocation of two nodes, a one-node and a
two-node srun step of real PyTorch (gloo across the nodes) on the host
runtime, their aggregates with the job's own scaling efficiency, and the
report's node-scaling section. The node has no GPU (the FAKE pynvml sees
none, tests/fakes)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_valid_result

pytestmark = pytest.mark.slow
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]
JOB_TIMEOUT_S = 900


def hpcai(env: dict, *args, timeout=JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def cluster_env(slurm_cluster, cpu_node) -> dict:
    return {**cpu_node.env, "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}


@pytest.mark.parametrize("scaling,batches", [("strong", {1: 4, 2: 2}), ("weak", {1: 4, 2: 4})])
def test_vary_nodes_runs_one_and_two_node_steps_and_reports_their_efficiency(
        cluster_env, result_schema, tmp_path, scaling, batches):
    results = tmp_path / "results"
    done = hpcai(cluster_env, "resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1",
                 "--runtime", "host", "--batch-size", "4", "--vary", "nodes=1,2",
                 "--scaling", scaling, "-o", str(results), "--slurm", timeout=120)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split("submitted job ")[1].split(":")[0]
    folder = Path(done.stdout.split("job folder ")[1].split(";")[0])
    waited = hpcai(cluster_env, "jobs", "-o", str(results), "--wait", job_id)
    log = folder / f"slurm-{job_id}.out"
    assert waited.returncode == 0, waited.stderr + log.read_text()[-4000:]
    job = json.loads((folder / "job.json").read_text())
    assert job["slurm"]["nodes"] == 2 and sorted(r["nodes"] for r in job["runs"]) == [1, 2]
    aggregates = {}
    for run in job["runs"]:
        nodes = [json.loads(p.read_text())
                 for p in sorted((folder / run["run_id"]).glob("node-*/result.json"))]
        assert len(nodes) == run["nodes"]
        for doc in nodes:
            assert_valid_result(doc, result_schema)
            assert doc["config"]["world_size"] == run["nodes"]
            assert doc["config"]["batch_size_per_process"] == batches[run["nodes"]]
            assert doc["spec"]["slurm"]["scaling"] == scaling
        aggregates[run["nodes"]] = json.loads((folder / run["run_id"] / "aggregate.json").read_text())
    two, one = aggregates[2], aggregates[1]
    assert two["node_count"] == 2 and two["scaling"]["mode"] == scaling
    # Against this job's own one-node run (aggregated again at the job's end).
    assert two["scaling"]["baseline"]["run_id"] == one["run_id"]
    assert two["scaling"]["efficiency"] == pytest.approx(
        two["throughput"]["per_gpu"] / one["throughput"]["per_gpu"])

    report = hpcai(cluster_env, "report", str(folder), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    [table] = [t for k, t in rep["tables"].items() if k.startswith("scaling-")]
    assert f"{scaling} scaling" in table["title"]
    assert [row[0] for row in table["rows"]] == ["1", "2"]
    assert float(table["rows"][1][4]) == pytest.approx(two["scaling"]["efficiency"], rel=1e-2)  # the table's 3 figures
    assert any(p["name"].startswith("scaling-") for p in rep["plots"])
