"""In-run cap sweeps under Slurm, on the real two-node CI cluster
(tests/slurm_fixtures.py): `hpcai-launch resnet50 --cap 250,300 --in-run
--slurm --nodes 2` runs ONE job step, in which real PyTorch trains across both
nodes (gloo) in one process per node while each node's launcher serves its own
node's control channel and sets the caps of its own GPUs. The GPUs are FAKES
(tests/fakes/pynvml.py); tests/slurm_per_node gives each Slurm node its own
simulated GPUs and power journal folder, as real nodes have. The fake reports
min(draw, cap) as power: a segment measured under another node's or another
segment's cap shows in its power.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAKES, ROOT, FakeNode, assert_valid_result, one_line_error
from fakes import fake_gpu_state

pytestmark = pytest.mark.slow
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]
JOB_TIMEOUT_S = 900
NODES = ["node1", "node2"]  # node ranks 0 and 1
COMMON = ["resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1", "--runtime", "host",
          "--nodes", "2", "--idle-s", "0"]


def hpcai(env: dict, *args, timeout=JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


class TwoGpuNodes:
    """Two FAKE H100s (200-700 W, at 700 W) on each Slurm node, apart."""

    def __init__(self, tmp: Path, slurm_conf: str):
        self.nodes = {}
        for name in [*NODES, "login"]:
            (tmp / name).mkdir()
            self.nodes[name] = FakeNode(tmp / name, fake_gpu_state.make_devices(2, "nvidia"))
        self.results = tmp / "results"
        self.env = dict(self.nodes["login"].env)
        self.env.update({
            "SLURM_CONF": slurm_conf,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "slurm_per_node"), str(FAKES),
                                           os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "HPCAI_FAKE_GPU_STATE_PER_NODE": str(tmp / "{node}" / "fake-gpus.json"),
            "HPCAI_STATE_DIR_PER_NODE": str(tmp / "{node}" / "state"),
        })

    def set_log(self, name: str) -> list[list[float]]:
        return [[e["watts"] for e in d["set_log"]] for d in self.nodes[name].devices()]


@pytest.fixture
def gpu_nodes(slurm_cluster, tmp_path) -> TwoGpuNodes:
    return TwoGpuNodes(tmp_path, slurm_cluster.env["SLURM_CONF"])


def submit(env: dict, *args) -> tuple[str, Path]:
    done = hpcai(env, *args, "--slurm", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "in-run (one step)" in done.stdout
    job_id = done.stdout.split("submitted job ")[1].split(":")[0]
    folder = Path(done.stdout.split("job folder ")[1].split(";")[0])
    return job_id, folder


def node_docs(folder: Path, run_id: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / run_id).glob("node-*/result.json"))]


def test_every_node_sets_its_own_caps_per_segment_and_each_segment_is_a_result_per_node(
        gpu_nodes, result_schema, tmp_path):
    env = gpu_nodes.env
    # Windows over 1 s: the report's validity checks want that much (tests/integration/
    # test_vary_sweeps.py); short ones, as the test is about the channel and the caps.
    job_id, folder = submit(env, *COMMON, "--cap", "250,300", "--in-run", "--seed", "3",
                            "--min-window-s", "1.5", "--max-window-s", "3",
                            "-o", str(gpu_nodes.results))
    waited = hpcai(env, "jobs", "-o", str(gpu_nodes.results), "--wait", job_id)
    log = folder / f"slurm-{job_id}.out"
    assert waited.returncode == 0, waited.stderr + log.read_text()[-6000:]
    assert "2/2" in waited.stdout  # both runs' aggregates complete
    job = json.loads((folder / "job.json").read_text())
    order = [r["cap_w"] for r in job["runs"]]
    assert sorted(order) == [250.0, 300.0]
    process = job["in_run"]["process_run_id"]
    assert (folder / "job.sbatch").read_text().count("srun ") == 1  # one step for both caps

    for rank, name in enumerate(NODES):
        # Each node's own GPUs: every segment's cap in the job's order, set once,
        # then the snapshot back; no journal left.
        assert gpu_nodes.set_log(name) == [[*order, 700.0]] * 2, name
        assert gpu_nodes.nodes[name].limits() == [700.0, 700.0]
        assert gpu_nodes.nodes[name].journal_files() == []
        # One process per node: its spec, channel and record, not a result (its
        # workload.log holds what its ranks printed: none when global rank 0 is elsewhere).
        here = folder / process / f"node-{rank}"
        assert (here / "spec.json").exists() and not (here / "result.json").exists()
        assert sorted(p.name for p in (here / "control").iterdir()) == \
            ["answer-0.json", "answer-1.json", "answer-2.json",
             "request-0.json", "request-1.json", "request-2.json"]
        assert json.loads((here / "process.json").read_text())["status"] == "complete"
    assert list((folder / process).glob("node-*/workload.log"))
    assert gpu_nodes.set_log("login") == [[], []]  # the submitting side set nothing

    for run in job["runs"]:
        cap, docs = run["cap_w"], node_docs(folder, run["run_id"])
        assert len(docs) == 2
        for rank, doc in enumerate(docs):
            assert_valid_result(doc, result_schema)
            assert doc["status"] == "complete"
            assert doc["run_id"] == run["run_id"] and doc["spec"]["power"]["cap_w"] == cap
            sweep, seg, slurm = doc["spec"]["sweep"], doc["segment"], doc["spec"]["slurm"]
            assert sweep["in_run"] is True and sweep["process_run_id"] == process
            assert sweep["position"] == run["index"] and sweep["id"] == folder.name
            assert seg["index"] == run["index"] and seg["process_run_id"] == process
            assert seg["after_segment"] == (run["index"] - 1 if run["index"] else None)
            assert seg["cap_w"] == cap and seg["enforced_w"] == {"0": cap, "1": cap}
            assert (slurm["job_id"], slurm["nodes"], slurm["node_rank"]) == (job_id, 2, rank)
            assert slurm["run_index"] == run["index"]
            assert doc["config"]["world_size"] == 2  # one process on each node, together
            # This node's GPUs drew min(650 W, cap) each while this segment was measured.
            assert doc["power"]["mean_power_w"] == pytest.approx(2 * min(650.0, cap), rel=0.02)
            limits = doc["launcher"]["gpu_limits"][0]
            assert limits["enforced_at_start_w"] == limits["enforced_at_end_w"] == cap
            assert doc["measurement"]["window"]["mode"] == "adaptive"
        aggregate = json.loads((folder / run["run_id"] / "aggregate.json").read_text())
        assert aggregate["status"] == "complete" and aggregate["cap_w"] == cap
        assert aggregate["node_count"] == 2
        assert aggregate["throughput"]["total"] == pytest.approx(
            sum(d["throughput"]["node"] for d in docs))

    # The report reads the segments as it reads a one-step-per-run job's node results.
    report = hpcai(env, "report", str(folder), "-o", str(tmp_path / "report"))
    # (on a loaded machine a segment's short blocks may spread too widely: then the
    # report leaves it out, as it would any such run)
    run_of = {r["cap_w"]: r["run_id"] for r in job["runs"]}
    valid = sorted({d["spec"]["power"]["cap_w"] for r in job["runs"]
                    for d in node_docs(folder, r["run_id"]) if d["validity"]["verdict"] != "fail"})
    if not valid:
        assert report.returncode != 0 and "no complete, valid result" in report.stderr
        return
    assert report.returncode == 0, report.stderr
    cells = json.loads((tmp_path / "report" / "report.json").read_text())["cells"]
    assert sorted(c["cap_w"] for c in cells) == valid
    for cell in cells:
        assert set(cell["run_ids"]) == {run_of[cell["cap_w"]]} and cell["enforced"] is True


def test_scancel_mid_sweep_restores_each_nodes_snapshot(slurm_cluster, gpu_nodes):
    env = gpu_nodes.env
    # Long windows: the job is cancelled while segment 2 (300 W) is being measured.
    job_id, folder = submit(env, *COMMON, "--cap", "250,300", "--in-run", "--order", "ascending",
                            "--min-window-s", "20", "--max-window-s", "30",
                            "-o", str(gpu_nodes.results))
    job = json.loads((folder / "job.json").read_text())
    first, second = job["runs"]
    deadline = time.monotonic() + 600
    while len(list((folder / second["run_id"]).glob("node-*/result.json"))) < 2:
        assert time.monotonic() < deadline, "segment 2 did not start on both nodes"
        assert slurm_cluster.state(job_id) in ("PENDING", "CONFIGURING", "RUNNING"), \
            (folder / f"slurm-{job_id}.out").read_text()[-4000:]
        time.sleep(0.5)
    time.sleep(2.0)
    assert all(gpu_nodes.nodes[n].limits() == [300.0, 300.0] for n in NODES)
    subprocess.run(["scancel", job_id], env=env, check=True)
    assert slurm_cluster.wait(job_id, 120) == "CANCELLED"

    for name in NODES:
        # The limits from before the sweep, not segment 1's 250 W.
        assert gpu_nodes.nodes[name].limits() == [700.0, 700.0], name
        assert gpu_nodes.set_log(name) == [[250.0, 300.0, 700.0]] * 2
        assert gpu_nodes.nodes[name].journal_files() == []
    assert [d["status"] for d in node_docs(folder, first["run_id"])] == ["complete"] * 2
    assert [d["status"] for d in node_docs(folder, second["run_id"])] == ["interrupted"] * 2
    waited = hpcai(env, "jobs", "-o", str(gpu_nodes.results), "--wait", job_id)
    one_line_error(waited, f"job {job_id} ended CANCELLED")


def test_an_in_run_job_array_is_a_one_line_error_that_leaves_nothing(gpu_nodes):
    done = hpcai(gpu_nodes.env, *COMMON, "--cap", "250,300", "--in-run", "--slurm", "--array",
                 "-o", str(gpu_nodes.results))
    one_line_error(done, "--in-run measures every cap in one job step", "--no-in-run")
    assert not gpu_nodes.results.exists() or not any(gpu_nodes.results.iterdir())
