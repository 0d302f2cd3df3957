"""Submitting to Slurm, without a cluster: the batch script (checked by real
bash), run slots, site defaults, the node's place and torchrun's rendezvous,
and the one-line errors that stop a submission before sbatch runs."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpcai.errors import SlurmError, UsageError
from hpcai.launcher.run import runtime
from hpcai.launcher.site import config as sites
from hpcai.launcher.run.options import Options
from hpcai.launcher.run.process import slurm_grace_s
from hpcai.launcher.slurm.job import Job, SlurmOptions, new_job_doc
from hpcai.launcher.slurm.node import Placement
from hpcai.launcher.slurm.script import render, sbatch_options
from hpcai.launcher.slurm.submit import check_options, run_slots, with_site_defaults
from conftest import one_line_error


def site_with(tmp_path: Path, scheduler: str, gpu: str = "") -> dict:
    path = tmp_path / "site.toml"
    path.write_text(f'name = "t"\n[gpu]\n{gpu}\n[scheduler]\n{scheduler}\n')
    return sites.load(str(path))


def make_job(tmp_path, opts: Options, slurm: SlurmOptions) -> Job:
    runs, seed = run_slots(opts, slurm.nodes)
    return Job(tmp_path / "job", new_job_doc(opts, slurm, runs, ["hpcai-launch", "x"], seed))


def test_site_scheduler_fills_what_the_command_line_leaves_out(tmp_path):
    site = site_with(tmp_path, 'partition = "gpu"\naccount = "proj"\ntime = "01:00:00"\n'
                               'extra_options = ["--exclusive"]', "per_node = 4")
    slurm = with_site_defaults(SlurmOptions(nodes=2, partition="debug",
                                            extra_options=["--qos=high"]), site, "auto")
    assert (slurm.partition, slurm.account, slurm.time) == ("debug", "proj", "01:00:00")
    assert slurm.gpus_per_node == 4
    assert slurm.extra_options == ["--exclusive", "--qos=high"]
    # CPU runs ask for no GPUs, whatever the site has.
    assert with_site_defaults(SlurmOptions(), site, "cpu").gpus_per_node is None


def test_a_site_without_slurm_refuses(tmp_path):
    with pytest.raises(UsageError, match="has no Slurm"):
        with_site_defaults(SlurmOptions(), site_with(tmp_path, 'kind = "none"'), "auto")


def test_allocation_script_runs_every_slot_in_the_sweep_order(tmp_path):
    opts = Options("resnet50", preset="tiny", caps=[200.0, 300.0], repeat=2, seed=7)
    job = make_job(tmp_path, opts, SlurmOptions(nodes=2, partition="gpu", gpus_per_node=4))
    assert [r.index for r in job.runs] == [0, 1, 2, 3]
    assert sorted(r.cap_w for r in job.runs) == [200.0, 200.0, 300.0, 300.0]
    assert len({r.run_id for r in job.runs}) == 4
    # The same seed gives the same order (a resubmission measures the same sweep).
    again = make_job(tmp_path, opts, SlurmOptions(nodes=2))
    assert [r.cap_w for r in again.runs] == [r.cap_w for r in job.runs]
    script = render(job, python="/opt/py/bin/python")
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=4\n" in script
    assert "#SBATCH --partition=gpu\n" in script and "--array" not in script
    assert "for index in 0 1 2 3; do" in script
    assert ('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
            '--ntasks-per-node=1 --kill-on-bad-exit=1') in script
    assert "HPCAI=(/opt/py/bin/python -m hpcai.launcher.cli)" in script
    # It runs where it was submitted from, so relative paths keep their meaning.
    assert f"\ncd {os.getcwd()} || exit 1" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_array_script_runs_one_slot_per_task(tmp_path):
    opts = Options("resnet50", preset="tiny", caps=[200.0, 250.0, 300.0], seed=1)
    job = make_job(tmp_path, opts, SlurmOptions(array=True))
    options = sbatch_options(job)
    assert "--array=0-2" in options and f"--output={job.folder}/slurm-%A_%a.out" in options
    script = render(job)
    assert 'run "$SLURM_ARRAY_TASK_ID"' in script and "for index" not in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_job_options_are_one_plain_run_per_node(tmp_path):
    opts = Options("resnet50", preset="tiny", caps=[200.0, 300.0], nproc=1, runtime="host",
                   slurm=SlurmOptions(nodes=2))
    job = make_job(tmp_path, opts, SlurmOptions(nodes=2))
    node_opts = job.options(job.runs[0].cap_w)
    assert node_opts.cap_w == job.runs[0].cap_w and not node_opts.is_sweep
    assert node_opts.slurm is None and node_opts.nproc == 1 and node_opts.runtime == "host"
    assert node_opts.output == str(job.folder)


@pytest.mark.parametrize("opts,slurm,match", [
    (Options("resnet50", impl="tensorflow"), SlurmOptions(nodes=2), "runs on one node"),
    (Options("llama3-8b-inference"), SlurmOptions(nodes=2), "runs on one node"),
    (Options("resnet50", cap_w=300.0), SlurmOptions(array=True), "--array needs several runs"),
    (Options("resnet50", cap_w=900.0), SlurmOptions(), "outside this site's allowed range"),
    (Options("resnet50", image="/nonexistent.sif"), SlurmOptions(), "does not exist"),
])
def test_login_node_checks(tmp_path, opts, slurm, match):
    site = site_with(tmp_path, "", "")
    site["power"]["allowed_cap_range_w"] = [200, 700]
    with pytest.raises(UsageError, match=match):
        check_options(opts, slurm, site)


def test_placement_comes_from_slurms_environment():
    env = {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "3", "SLURM_NODEID": "1",
           "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "node[1-2]"}
    here = Placement.from_environ(env)
    assert (here.nodes, here.node_rank, here.nodelist) == (2, 1, "node[1-2]")
    # Every node derives the same port for a step; the next step gets another.
    other_node = Placement.from_environ({**env, "SLURM_NODEID": "0"})
    assert here.rendezvous_port() == other_node.rendezvous_port()
    assert here.rendezvous_port() != Placement.from_environ(
        {**env, "SLURM_STEP_ID": "4"}).rendezvous_port()
    with pytest.raises(SlurmError, match="SLURM_JOB_ID, SLURM_NODEID not set"):
        Placement.from_environ({})


@pytest.mark.parametrize("kill_wait_s, grace_s", [(None, 20), (30, 20), (120, 20), (15, 5), (5, 1)])
def test_workload_stops_early_enough_for_the_cap_restore(kill_wait_s, grace_s):
    # Slurm SIGKILLs KillWait seconds after its SIGTERM; the restore keeps its 10 s.
    assert slurm_grace_s(kill_wait_s) == grace_s


def test_multi_node_torchrun_meets_at_the_rendezvous():
    slurm = {"nodes": 2, "rdzv_endpoint": "10.0.0.1:29601", "rdzv_id": "hpcai-812-3"}
    cmd = runtime.entrypoint_command("/r/spec.json", 4, python="py", slurm=slurm)
    assert cmd[:3] == ["py", "-m", "torch.distributed.run"]
    assert "--nnodes=2" in cmd and "--nproc-per-node=4" in cmd and "--standalone" not in cmd
    assert "--rdzv-backend=c10d" in cmd and "--rdzv-endpoint=10.0.0.1:29601" in cmd
    assert cmd[-2:] == ["--spec", "/r/spec.json"]
    # One node under Slurm is an ordinary run.
    assert runtime.entrypoint_command("s", 1, python="py", slurm={"nodes": 1}) == \
        ["py", "-m", "hpcai.workloads", "run", "--spec", "s"]


# ---- the command line ------------------------------------------------------
def test_slurm_options_without_slurm_are_an_error(cpu_node):
    one_line_error(cpu_node.launch("resnet50", "--nodes", "2"), "--nodes only apply with --slurm")


def test_dry_run_prints_the_script_and_writes_nothing(cpu_node):
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "--nodes", "2",
                           "--cap", "200:300:100", "--dry-run", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("#!/bin/bash\n#SBATCH --job-name=hpcai-resnet50\n")
    assert "not submitted" in done.stderr
    assert not cpu_node.results.exists() or not any(cpu_node.results.iterdir())


def test_no_sbatch_is_a_one_line_error_that_leaves_nothing(cpu_node, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    cpu_node.env["PATH"] = str(empty)  # a machine without Slurm's commands
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "-o", str(cpu_node.results))
    one_line_error(done, "`sbatch` is not on PATH", "login node")
    assert not list(cpu_node.results.glob("slurm-*"))


def test_jobs_without_jobs_says_so(cpu_node):
    done = cpu_node.launch("jobs", "-o", str(cpu_node.results))
    assert done.returncode == 0 and "no jobs submitted" in done.stdout


def test_unknown_command_error_hides_internal_commands(cpu_node):
    done = cpu_node.launch("nosuch")
    one_line_error(done, "jobs")
    assert "slurm-node" not in done.stderr


def test_slurm_node_outside_a_job_is_an_error(cpu_node, tmp_path):
    opts = Options("resnet50", preset="tiny")
    job = make_job(tmp_path, opts, SlurmOptions())
    job.folder.mkdir()
    job.write()
    env = {k: v for k, v in cpu_node.env.items() if not k.startswith("SLURM_")}
    cpu_node.env.clear()
    cpu_node.env.update(env)
    one_line_error(cpu_node.launch("slurm-node", str(job.folder), "--run", "0"),
                   "not set", "--slurm")
    one_line_error(cpu_node.launch("slurm-node", str(job.folder), "--run", "5"), "run 5")
    assert os.listdir(job.folder) == ["job.json"]


def test_inside_a_job_only_the_cpus_it_holds_are_used(monkeypatch):
    from hpcai.provenance import usable_cpus

    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    everything = usable_cpus()
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "1")
    assert usable_cpus() == 1
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", str(everything + 8))  # never more than the mask
    assert usable_cpus() == everything


def test_the_job_folder_is_named_by_the_preset_the_node_will_choose(cpu_node):
    def folder(*args):
        done = cpu_node.launch("resnet50", "--slurm", *args, "--dry-run", "-o", str(cpu_node.results))
        assert done.returncode == 0, done.stderr
        return done.stderr.rsplit("the job folder would be ", 1)[1].strip()

    assert folder("--device", "cpu").endswith("-resnet50-short")  # the CPU default
    assert folder("--gpus", "4").endswith("-resnet50-fast")  # GPUs asked for: the GPU default
    assert folder("--preset", "tiny").endswith("-resnet50-tiny")
    assert folder().endswith("-resnet50-default")  # only the node can tell: never "auto"
