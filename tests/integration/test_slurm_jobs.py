"""`hpcai-launch --slurm` on a real two-node Slurm (tests/slurm_fixtures.py):
a two-node tiny ResNet-50 through the CPU image (gloo across the nodes, a
c10d rendezvous at node1), node results, the aggregate and its scaling
efficiency; a job array; scancel in the middle of a capped run (GPUs from the
FAKE pynvml, tests/fakes); a failing job; and the errors sbatch never sees.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_valid_result
from conftest import one_line_error
from image_fixtures import IMAGE_BUILD_TIMEOUT_S

pytestmark = pytest.mark.slow
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]
JOB_TIMEOUT_S = 900


def hpcai(env: dict, *args, timeout=JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def submit(env: dict, *args) -> tuple[str, Path]:
    done = hpcai(env, *args, "--slurm", timeout=120)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split("submitted job ")[1].split(":")[0]
    folder = Path(done.stdout.split("job folder ")[1].split(";")[0])
    return job_id, folder


def node_results(folder: Path) -> dict[str, list[dict]]:
    runs = {}
    for run_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        runs[run_dir.name] = [json.loads(p.read_text())
                              for p in sorted(run_dir.glob("node-*/result.json"))]
    return runs


@pytest.fixture
def cluster_env(slurm_cluster, cpu_node) -> dict:
    """A node without GPUs (the fake libraries see none), on the test cluster."""
    return {**cpu_node.env, "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}


@pytest.fixture
def capped_cluster_env(slurm_cluster, fake_nvidia_node) -> dict:
    """Two FAKE H100s (tests/fakes) whose caps the jobs set, on the test cluster."""
    return {**fake_nvidia_node.env, "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}


@pytest.mark.timeout(IMAGE_BUILD_TIMEOUT_S)  # it builds the image when run alone
def test_two_nodes_train_together_in_the_image(cluster_env, cpu_cv_image, result_schema,
                                               tmp_path):
    results = tmp_path / "results"
    common = ["--preset", "tiny", "--nproc", "1", "--image", str(cpu_cv_image["image"]),
              "-o", str(results)]
    # The single-node baseline: a plain run of the same measurement, same image.
    base = hpcai(cluster_env, "resnet50", *common)
    assert base.returncode == 0, base.stderr[-3000:]
    job_id, folder = submit(cluster_env, "resnet50", *common, "--nodes", "2")
    waited = hpcai(cluster_env, "jobs", "-o", str(results), "--wait", job_id)
    log = folder / f"slurm-{job_id}.out"
    assert waited.returncode == 0, waited.stderr + log.read_text()[-4000:]
    assert "COMPLETED" in waited.stdout and "1/1" in waited.stdout
    assert (folder / "job.sbatch").read_text().startswith("#!/bin/bash\n")

    [(run_id, nodes)] = node_results(folder).items()
    assert len(nodes) == 2
    for rank, doc in enumerate(nodes):
        assert_valid_result(doc, result_schema)
        assert doc["status"] == "complete"
        slurm = doc["spec"]["slurm"]
        assert (slurm["job_id"], slurm["nodes"], slurm["node_rank"]) == (job_id, 2, rank)
        assert slurm["rdzv_endpoint"].startswith("127.0.0.1:")  # node1's NodeAddr
        assert slurm["kill_wait_s"] == 30  # tools/slurm-ci's KillWait, read on the node
        # One process per node, two in the world: gloo really spanned both nodes.
        assert doc["config"]["processes"] == 1 and doc["config"]["world_size"] == 2
        assert doc["config"]["nodes"] == 2 and len(doc["ranks"]) == 1
        assert doc["runtime"]["kind"] == "apptainer"

    aggregate = json.loads((folder / run_id / "aggregate.json").read_text())
    assert aggregate["status"] == "complete" and aggregate["node_count"] == 2
    total = sum(d["throughput"]["node"] for d in nodes)
    assert aggregate["throughput"]["total"] == pytest.approx(total)
    assert aggregate["throughput"]["gpus"] == 2
    assert aggregate["throughput"]["per_gpu"] == pytest.approx(total / 2)
    [baseline] = [json.loads(p.read_text()) for p in results.glob("*/result.json")]
    scaling = aggregate["scaling"]
    assert scaling["baseline"]["run_id"] == baseline["run_id"]
    assert scaling["efficiency"] == pytest.approx(
        aggregate["throughput"]["per_gpu"] / baseline["throughput"]["per_gpu"])


def test_vit_sd2_and_litgpt_pretraining_span_two_nodes(cluster_env, tmp_path):
    """The other training workloads on the host runtime, submitted together
    (each job holds one CPU per node, so they run side by side)."""
    from test_llm_pretrain import make_corpus_and_tokenizer

    make_corpus_and_tokenizer(tmp_path)
    env = {**cluster_env, "HPCAI_DATA_DIR": str(tmp_path), "HPCAI_MODELS_DIR": str(tmp_path)}
    results = tmp_path / "results"
    common = ["--preset", "tiny", "--nproc", "1", "--runtime", "host", "--nodes", "2",
              "-o", str(results)]
    folders = {w: submit(env, w, *common, *extra)[1] for w, extra in [
        ("vit-l16", []), ("sd2", []),
        ("llama3-8b-pretrain", ["--data", "corpus", "--tokenizer", "tokenizer"])]}
    waited = hpcai(env, "jobs", "-o", str(results), "--wait")
    assert waited.returncode == 0, waited.stderr
    for workload, folder in folders.items():
        [(run_id, nodes)] = node_results(folder).items()
        assert [d["status"] for d in nodes] == ["complete", "complete"], workload
        assert all(d["config"]["world_size"] == 2 for d in nodes), workload
        aggregate = json.loads((folder / run_id / "aggregate.json").read_text())
        assert aggregate["status"] == "complete" and aggregate["throughput"]["total"] > 0
    # LitGPT's Fabric saw two nodes: one global batch over both.
    pretrain = node_results(folders["llama3-8b-pretrain"])
    [node0, _] = next(iter(pretrain.values()))
    assert node0["config"]["global_batch_size"] == 2 * node0["config"]["micro_batch_size"]


def test_a_sweep_as_a_job_array_lands_in_one_folder(cluster_env, slurm_cluster, tmp_path):
    results = tmp_path / "results"
    job_id, folder = submit(cluster_env, "resnet50", "--preset", "tiny", "--nproc", "1",
                            "--runtime", "host", "--repeat", "2", "--array", "-o", str(results))
    waited = hpcai(cluster_env, "jobs", "-o", str(results), "--wait")
    assert waited.returncode == 0, waited.stderr + "".join(
        p.read_text()[-2000:] for p in folder.glob("slurm-*.out"))
    assert sorted(p.name for p in folder.glob("slurm-*.out")) == \
        [f"slurm-{job_id}_0.out", f"slurm-{job_id}_1.out"]
    runs = node_results(folder)
    assert len(runs) == 2
    for run_id, nodes in runs.items():
        assert [d["status"] for d in nodes] == ["complete"]
        assert nodes[0]["spec"]["slurm"]["mode"] == "array"
        assert json.loads((folder / run_id / "aggregate.json").read_text())["status"] == "complete"


def submit_capped_cpu_run(env: dict, results, caps: str, epochs: int, *extra: str):
    """A one-node tiny ResNet-50 on CPU whose caps land on the fake NVIDIA node."""
    return submit(env, "resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1",
                  "--runtime", "host", "--cap", caps, "--epochs", str(epochs), *extra,
                  "-o", str(results))


def test_scancel_interrupts_the_run_and_restores_the_caps(slurm_cluster, fake_nvidia_node,
                                                          capped_cluster_env):
    env, results = capped_cluster_env, fake_nvidia_node.results
    # Two caps in one allocation, one step each (in-run sweeps under Slurm have
    # their own scancel test); the job is cancelled during the first run.
    job_id, folder = submit_capped_cpu_run(env, results, "250,300", 200, "--no-in-run")
    deadline = time.monotonic() + 300
    while not list(folder.glob("*/node-0/result.json")):
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.5)
    time.sleep(1.0)
    assert min(fake_nvidia_node.limits()) < 700  # the cap is on while the job runs
    subprocess.run(["scancel", job_id], env=env, check=True)
    assert slurm_cluster.wait(job_id, 120) == "CANCELLED"

    assert fake_nvidia_node.limits() == [700.0, 700.0]  # restored
    assert fake_nvidia_node.journal_files() == []
    runs = node_results(folder)
    assert len(runs) == 1  # the second cap never started
    [doc] = next(iter(runs.values()))
    assert doc["status"] == "interrupted"
    waited = hpcai(env, "jobs", "-o", str(results), "--wait", job_id)
    one_line_error(waited, f"job {job_id} ended CANCELLED", f"slurm-{job_id}.out")


def test_the_time_limit_interrupts_the_run_and_restores_the_caps(slurm_cluster, fake_nvidia_node,
                                                                 capped_cluster_env):
    env, results = capped_cluster_env, fake_nvidia_node.results
    # One minute, far less than 5000 epochs take: Slurm ends it with SIGTERM.
    job_id, folder = submit_capped_cpu_run(env, results, "250", 5000, "--time", "1")
    assert slurm_cluster.wait(job_id, 300) == "TIMEOUT"
    assert fake_nvidia_node.limits() == [700.0, 700.0]
    assert fake_nvidia_node.journal_files() == []
    [doc] = next(iter(node_results(folder).values()))
    assert doc["status"] == "interrupted" and "SIGTERM" in doc["error"]["message"]
    assert doc["power"]["cap"]["requested_w"] == 250.0
    waited = hpcai(env, "jobs", "-o", str(results), "--wait", job_id)
    one_line_error(waited, f"job {job_id} ended TIMEOUT")


def test_a_failing_job_points_to_its_log(cluster_env, tmp_path):
    results = tmp_path / "results"
    job_id, folder = submit(cluster_env, "sd2", "--preset", "tiny", "--nproc", "1",
                            "--runtime", "host", "--weights", str(tmp_path / "no-such-weights"),
                            "-o", str(results))
    waited = hpcai(cluster_env, "jobs", "-o", str(results), "--wait", job_id)
    one_line_error(waited, f"job {job_id} ended FAILED", f"see its log {folder}/slurm-{job_id}.out")
    assert "no-such-weights" in (folder / f"slurm-{job_id}.out").read_text()
    listed = hpcai(cluster_env, "jobs", "-o", str(results))
    assert "FAILED" in listed.stdout and "0/1" in listed.stdout


@pytest.mark.parametrize("options,fragments", [
    (["--partition", "gpu-xl"], ["unknown partition 'gpu-xl'", "this cluster has: ci"]),
    (["--time", "soon"], ["sbatch rejected the job: Invalid --time specification",
                          "--dry-run prints the job script"]),
])
def test_a_refused_submission_is_one_line_and_leaves_nothing(cluster_env, tmp_path, options,
                                                             fragments):
    results = tmp_path / "results"
    done = hpcai(cluster_env, "resnet50", "--preset", "tiny", "--slurm", *options,
                 "-o", str(results))
    one_line_error(done, *fragments)
    assert not list(results.glob("slurm-*"))
