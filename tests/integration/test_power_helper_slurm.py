"""Issue 25, section 4: hpcai-power-helper with the real two-node Slurm
(tests/slurm_fixtures.py) and a real unprivileged user made here (useradd).

The user submits a real job; the helper (as root, with SUDO_UID as sudo sets
it) caps a GPU only for a user whose running job Slurm says holds it, within
the site's range, takes the node's cap authority, and the epilog's
`restore --job ID` puts the limit back. The GPU library is the FAKE pynvml
(tests/fakes). sudo itself is not installed on this machine: the helper is
started as sudo would start it (root, SUDO_UID set, a clean environment).

Run under `flock /work/locks/slurm.lock` (fixed ports).
"""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
import uuid as uuid_module
from pathlib import Path

import pytest

from conftest import FAKES, ROOT
from fakes import fake_gpu_state as fgs
from hpcai.launcher.power import authority, helper

pytestmark = pytest.mark.slow


@pytest.fixture
def user():
    """A real unprivileged user, removed afterwards."""
    name = f"hpcai{uuid_module.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def helper_config(slurm_cluster, tmp_path):
    """The site's helper settings at their fixed place, as an admin writes them."""
    path = helper.HELPER_CONFIG
    saved = path.read_bytes() if path.exists() else None
    path.parent.mkdir(mode=0o755, exist_ok=True)
    path.write_text(f'slurm_conf = "{slurm_cluster.conf}"\nallowed_cap_range_w = [250, 600]\n')
    os.chmod(path, 0o644)
    yield path
    if saved is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(saved)


@pytest.fixture
def gpus(tmp_path):
    state = tmp_path / "gpus.json"
    fgs.write_state(state, fgs.make_devices(2, "nvidia"))
    uuids = [d["uuid"] for d in fgs.read_state(state)["devices"]]
    yield state, uuids
    for u in uuids:
        for suffix in ("lock", "holder.json", "original.json", "job.json"):
            (authority.LOCK_ROOT / f"gpu-{u}.{suffix}").unlink(missing_ok=True)


def limits(state) -> list[float]:
    return [d["current_limit_w"] for d in fgs.read_state(state)["devices"]]


def run_helper(state: Path, *args: str, sudo_uid: int | None, extra_env: dict | None = None):
    """As sudo runs it: root, a clean environment, SUDO_UID set. HPCAI_FAKE_GPU_STATE
    and PYTHONPATH only put the FAKE GPU library in place of the real one."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(FAKES),
           "HPCAI_FAKE_GPU_STATE": str(state), **(extra_env or {})}
    if sudo_uid is not None:
        env["SUDO_UID"] = str(sudo_uid)
    return subprocess.run([sys.executable, "-m", "hpcai.launcher.power.helper", *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


def submit_as(cluster, user, *args: str) -> str:
    done = subprocess.run(["runuser", "-u", user.pw_name, "--", "sbatch", "--parsable", "--chdir=/tmp",
                           "--output=/dev/null", *args], capture_output=True, text=True,
                          env=cluster.env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


@pytest.fixture
def traversable(slurm_cluster):
    """The test cluster keeps its config and slurmd spool in root's private tmp
    folder; a real cluster's are readable by its users (/etc/slurm) and slurmd
    runs their jobs from its spool: let others pass through (x, not read) meanwhile."""
    changed = []
    folder = slurm_cluster.confdir
    while folder != folder.parent and folder != Path("/tmp"):
        mode = folder.stat().st_mode & 0o7777
        if not mode & 0o001:
            changed.append((folder, mode))
            os.chmod(folder, mode | 0o001)
        folder = folder.parent
    for sub in ("spool", "spool/node1", "spool/node2"):
        path = slurm_cluster.confdir / sub
        changed.append((path, path.stat().st_mode & 0o7777))
        os.chmod(path, changed[-1][1] | 0o005)
    yield
    for path, mode in changed:
        os.chmod(path, mode)


def wait_running(cluster, job_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (state := cluster.state(job_id)) != "RUNNING":
        assert state in ("PENDING", "CONFIGURING"), \
            f"job {job_id} is {state}: {cluster.run('scontrol', 'show', 'job', job_id).stdout}"
        assert time.monotonic() < deadline, f"job {job_id} still {state}"
        time.sleep(0.5)


def test_helper_caps_only_the_callers_job_gpus_and_the_epilog_restores(
        slurm_cluster, traversable, helper_config, user, gpus):
    state, uuids = gpus
    job = submit_as(slurm_cluster, user, "--exclusive", "-N1", "--wrap", "sleep 600")
    try:
        wait_running(slurm_cluster, job)

        # Another user without a job here, even with the job's id in its environment.
        nobody = pwd.getpwnam("nobody").pw_uid
        done = run_helper(state, uuids[0], "300", sudo_uid=nobody, extra_env={"SLURM_JOB_ID": job})
        assert done.returncode != 0 and "has no running Slurm job on this node holding GPU 0" in done.stderr
        assert limits(state) == [700.0, 700.0]

        # Outside the site's allowed range, and a UUID this node lacks: refused, nothing set.
        done = run_helper(state, uuids[0], "200", sudo_uid=user.pw_uid)
        assert done.returncode != 0 and "outside the site's allowed caps 250-600 W" in done.stderr
        done = run_helper(state, "GPU-not-here", "300", sudo_uid=user.pw_uid)
        assert done.returncode != 0 and "no GPU on this node has UUID GPU-not-here" in done.stderr
        assert limits(state) == [700.0, 700.0]

        # The job's owner: set, through the node's authority, recorded for the job.
        done = run_helper(state, uuids[0], "300", sudo_uid=user.pw_uid)
        assert done.returncode == 0, done.stderr
        assert f"for Slurm job {job}" in done.stdout
        assert limits(state) == [300.0, 700.0]
        assert authority.original_of(uuids[0])["limit_w"] == 700.0
        record = authority.read_private_json(authority.LOCK_ROOT / f"gpu-{uuids[0]}.job.json")
        assert record["job_id"] == job and record["uid"] == user.pw_uid and record["user"] == user.pw_name
        # A second cap for the same job keeps the first holder's original.
        assert run_helper(state, uuids[0], "400", sudo_uid=user.pw_uid).returncode == 0
        assert authority.original_of(uuids[0])["limit_w"] == 700.0

        # The epilog (root, no SUDO_UID) puts it back.
        done = run_helper(state, "restore", "--job", job, sudo_uid=None)
        assert done.returncode == 0, done.stderr
        assert limits(state) == [700.0, 700.0]
        assert authority.original_of(uuids[0]) is None
        assert not (authority.LOCK_ROOT / f"gpu-{uuids[0]}.job.json").exists()
    finally:
        slurm_cluster.run("scancel", job)


def test_helper_refuses_a_job_that_does_not_hold_the_gpu(
        slurm_cluster, traversable, helper_config, user, gpus):
    """A job sharing the node (not exclusive, no GPU GRES) holds none of its GPUs."""
    state, uuids = gpus
    job = submit_as(slurm_cluster, user, "-N1", "-n1", "--oversubscribe", "--wrap", "sleep 600")
    try:
        wait_running(slurm_cluster, job)
        done = run_helper(state, uuids[1], "300", sudo_uid=user.pw_uid)
        assert done.returncode != 0 and "holding GPU 1" in done.stderr, done.stderr
        assert limits(state) == [700.0, 700.0]
    finally:
        slurm_cluster.run("scancel", job)


def test_helper_refuses_settings_another_user_could_write(helper_config, gpus):
    state, uuids = gpus
    os.chmod(helper_config, 0o666)
    done = run_helper(state, uuids[0], "300", sudo_uid=pwd.getpwnam("nobody").pw_uid)
    assert done.returncode != 0 and "refusing the power helper settings" in done.stderr
    assert "world-writable" in done.stderr and limits(state) == [700.0, 700.0]
