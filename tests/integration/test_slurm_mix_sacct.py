"""`hpcai-launch slurm mix` on a real Slurm with job accounting (issue 42: the
mix from sacct): tools/slurm-ci with HPCAI_SLURM_CI_ACCOUNTING=1 runs Debian's
slurmdbd on a private MariaDB, and its nodes have two GPUs each as GRES. Jobs of
two classes (and one that matches no rule) run; the mix's shares are checked
against GPU-hours computed here from sacct's own per-job answer. Without
accounting (the suite's usual cluster) the command says so in one line.

Run under `flock /tmp/hpcai-services.lock` (fixed ports).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from slurm_fixtures import SLURM_CI, SlurmCluster

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.slow
SITE = """\
name = "mix-ci"

[[classes]]
name = "llm"
workload = "llama3-8b-pretrain"
job_name = "llama*"

[[classes]]
name = "cv"
workload = "resnet50"
hpcai_workload = "resnet*"
"""


@pytest.fixture(scope="module")
def accounting_cluster(slurm_cluster):
    """A second private cluster, with accounting, on its own ports. It asks for the
    suite's cluster first, so that munged is that one's (started and stopped once)."""
    confdir = Path(tempfile.mkdtemp(prefix="hpcai-slurm-acct-"))
    env = {**os.environ, "HPCAI_SLURM_CI_ACCOUNTING": "1", "HPCAI_SLURM_CI_PORT_BASE": "17100"}
    try:
        start = subprocess.run([str(SLURM_CI / "start.sh"), str(confdir)], capture_output=True, text=True,
                               timeout=180, env=env)
        if start.returncode != 0:
            pytest.fail(f"tools/slurm-ci/start.sh with accounting failed:\n{start.stderr}", pytrace=False)
        yield SlurmCluster(confdir)
    finally:
        subprocess.run([str(SLURM_CI / "stop.sh"), str(confdir)], capture_output=True, timeout=180)
        shutil.rmtree(confdir, ignore_errors=True)


def hpcai_launch(cluster, *args, cwd):
    return subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", *args], capture_output=True, text=True,
                          env={**cluster.env, "PATH": f"{os.environ['PATH']}:/usr/sbin"}, cwd=cwd, timeout=120)


def accounted(cluster, job_ids: list[str], timeout: float = 120) -> dict[str, float]:
    """GPU-hours per job from sacct once it has all of them as COMPLETED (the
    controller hands records to slurmdbd a moment after a job ends)."""
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.run("sacct", "-n", "-P", "-X", "-j", ",".join(job_ids),
                          "--format", "JobID,AllocTRES,ElapsedRaw,State").stdout
        rows = [line.split("|") for line in out.splitlines() if line]
        if len(rows) == len(job_ids) and all(row[3] == "COMPLETED" for row in rows):
            break
        assert time.monotonic() < deadline, f"sacct still says:\n{out}"
        time.sleep(0.5)
    hours = {}
    for job_id, tres, elapsed, _ in rows:
        gpus = [int(item.split("=")[1]) for item in tres.split(",") if item.startswith("gres/gpu=")]
        hours[job_id] = (gpus[0] if gpus else 0) * int(elapsed) / 3600
    return hours


def test_the_mix_from_sacct_on_a_real_slurm_with_accounting(accounting_cluster, tmp_path):
    cluster = accounting_cluster
    since = datetime.date.today().isoformat()
    jobs = {"llm": cluster.sbatch("--job-name", "llama-8b", "--gres=gpu:2", "--output=/dev/null", "--wrap", "sleep 3"),
            "cv": cluster.sbatch("--job-name", "hpcai-resnet50", "--gpus=1", "--output=/dev/null", "--wrap", "sleep 2"),
            None: cluster.sbatch("--job-name", "shell", "--gpus=1", "--output=/dev/null", "--wrap", "sleep 1")}
    for job_id in jobs.values():
        assert cluster.wait(job_id, timeout=120) == "COMPLETED"
    hours = accounted(cluster, list(jobs.values()))
    assert all(h > 0 for h in hours.values()), hours  # each job held GPUs for whole seconds

    (tmp_path / "site.toml").write_text(SITE)
    done = hpcai_launch(cluster, "slurm", "mix", "--since", since, "--partition", "ci", "-o", "mix.toml",
                        "--site", str(tmp_path / "site.toml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote mix.toml: partition ci, ")
    text = (tmp_path / "mix.toml").read_text()
    doc = tomllib.loads(text)
    classified = hours[jobs["llm"]] + hours[jobs["cv"]]
    assert doc["default_partition"] == "ci"
    by_name = {c["name"]: c for c in doc["class"]}
    assert set(by_name) == {"llm", "cv"}
    assert by_name["llm"]["workload"] == "llama3-8b-pretrain" and by_name["cv"]["workload"] == "resnet50"
    for name in ("llm", "cv"):
        assert abs(by_name[name]["share"] - hours[jobs[name]] / classified) <= 1e-4, (name, hours, text)
    assert abs(sum(c["share"] for c in doc["class"]) - 1) < 1e-9
    assert f"no class (matched no rule; left out): 1 job(s), {hours[jobs[None]]:.2f} GPU-hours" in text

    # The plan straight from sacct: the same mix, written beside the plan for the user to edit.
    (tmp_path / "results").mkdir()
    planned = hpcai_launch(cluster, "plan", "results", "--mix-from-sacct", "--since", since, "--partition", "ci",
                           "--site", str(tmp_path / "site.toml"), "--reference", "-o", "plan", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert (tmp_path / "plan" / "mix.toml").read_text() == text
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert {c["name"]: c["share"] for c in plan["inputs"]["mix"]} == {n: by_name[n]["share"] for n in by_name}


def test_without_accounting_the_mix_is_one_line(slurm_cluster, tmp_path):
    (tmp_path / "site.toml").write_text(SITE)
    done = hpcai_launch(slurm_cluster, "slurm", "mix", "--since", "2026-01-01", "--partition", "ci",
                        "-o", "mix.toml", "--site", str(tmp_path / "site.toml"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "this cluster keeps no job accounting" in lines[0], done.stderr
    assert not (tmp_path / "mix.toml").exists()
