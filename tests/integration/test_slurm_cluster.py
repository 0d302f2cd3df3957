"""The slurm_cluster fixture itself (tests/slurm_fixtures.py): a real two-node
Slurm on this machine, whose jobs end in the states a real cluster reports."""
from __future__ import annotations

import time


def test_srun_spans_both_nodes(slurm_cluster):
    out = slurm_cluster.run("srun", "-N2", "-n2", "bash", "-c", "echo $SLURMD_NODENAME")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == slurm_cluster.nodes


def test_batch_job_completes_and_its_srun_finds_the_cluster(slurm_cluster, tmp_path):
    output = tmp_path / "job.out"
    job = slurm_cluster.sbatch("-N2", "-o", str(output),
                               "--wrap", 'srun -n2 bash -c "echo \\$SLURMD_NODENAME"')
    assert slurm_cluster.wait(job, 60) == "COMPLETED", output.read_text()
    assert sorted(output.read_text().split()) == slurm_cluster.nodes


def test_nonzero_exit_ends_failed(slurm_cluster, tmp_path):
    job = slurm_cluster.sbatch("-o", str(tmp_path / "job.out"), "--wrap", "exit 3")
    assert slurm_cluster.wait(job, 60) == "FAILED"
    out = slurm_cluster.run("scontrol", "show", "job", job)
    assert " ExitCode=3:0" in out.stdout


def test_scancel_ends_cancelled_promptly(slurm_cluster, tmp_path):
    job = slurm_cluster.sbatch("-o", str(tmp_path / "job.out"), "--wrap", "sleep 300")
    deadline = time.monotonic() + 30
    while slurm_cluster.state(job) != "RUNNING":
        assert time.monotonic() < deadline, f"job {job} never started"
        time.sleep(0.2)
    started = time.monotonic()
    assert slurm_cluster.run("scancel", job).returncode == 0
    # sleep dies on the SIGTERM; KillWait (30 s) would be the SIGKILL.
    assert slurm_cluster.wait(job, 20) == "CANCELLED"
    assert time.monotonic() - started < 10
