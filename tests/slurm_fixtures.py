"""A real two-node Slurm (Debian's slurm-wlm + munge, set up by `make setup-system`)
private to the test session: tools/slurm-ci/start.sh runs slurmctld and two slurmd
("node1", "node2") with all their state under a tmp dir; stop.sh ends them."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SLURM_CI = Path(__file__).resolve().parent.parent / "tools" / "slurm-ci"
# States a job passes through before it ends (sacct is not there: no accounting).
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"}


class SlurmCluster:
    partition = "ci"
    nodes = ["node1", "node2"]

    def __init__(self, confdir: Path):
        self.confdir = confdir
        self.conf = confdir / "slurm.conf"
        # Client commands (and, through them, jobs) find the cluster by SLURM_CONF.
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def sbatch(self, *args: str) -> str:
        """Submit; returns the job id."""
        out = self.run("sbatch", "--parsable", *args)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split(";")[0]

    def state(self, job_id: str) -> str:
        """JobState from scontrol (finished jobs stay known for MinJobAge=600 s)."""
        out = self.run("scontrol", "show", "job", job_id)
        found = re.search(r"JobState=(\S+)", out.stdout)
        assert found, f"scontrol show job {job_id}: {out.stdout}{out.stderr}"
        return found.group(1)

    def wait(self, job_id: str, timeout: float) -> str:
        """The job's final state (COMPLETED, FAILED, CANCELLED, ...) once it has ended."""
        deadline = time.monotonic() + timeout
        while (state := self.state(job_id)) in ACTIVE_STATES:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {state} after {timeout} s")
            time.sleep(0.2)
        return state


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    if os.geteuid() != 0:
        pytest.fail("the Slurm tests start slurmctld, slurmd (SlurmUser=root) and munged: "
                    "run them as root")
    # The daemons live in /usr/sbin, which not every PATH has.
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    missing = [exe for exe in ("sbatch", "slurmctld", "slurmd", "munged")
               if not shutil.which(exe, path=path)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: run `make setup-system` as root "
                    "(apt-get install slurm-wlm munge)")
    # Not under pytest's /tmp/pytest-of-$USER: every pytest session that starts (other
    # users' too) resets that folder to 0700, which would cut a test's unprivileged
    # user (test_power_helper_slurm.py) off from slurmd's spool in the middle of a job.
    confdir = Path(tempfile.mkdtemp(prefix="hpcai-slurm-"))
    stop = [str(SLURM_CI / "stop.sh"), str(confdir)]
    try:
        start = subprocess.run([str(SLURM_CI / "start.sh"), str(confdir)], capture_output=True,
                               text=True, timeout=90)
        if start.returncode != 0:
            pytest.fail(f"tools/slurm-ci/start.sh failed:\n{start.stderr}", pytrace=False)
        yield SlurmCluster(confdir)
    finally:
        # Also after a failed start: it may have started some daemons (or munged).
        subprocess.run(stop, capture_output=True, timeout=120)
        shutil.rmtree(confdir, ignore_errors=True)
