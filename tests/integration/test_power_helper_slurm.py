"""Issue 25, section 4: hpcai-power-helper with the real two-node Slurm
(tests/slurm_fixtures.py) and a real unprivileged user made here (useradd).

The user submits a real job; the helper (as root, with SUDO_UID as sudo sets
it) caps a GPU only for a user whose running job Slurm says holds it, within
the site's range, takes the node's cap authority, and the epilog's
`restore --job ID` puts the limit back. The GPU library is the FAKE pynvml
(tests/fakes). The first tests start the helper as sudo would (root, SUDO_UID
set, a clean environment); the last goes through the real sudo (`make
setup-system` installs it) with the docs' sudoers rule, and checks that a root
launcher leaves a running job's cap alone.

Run under `flock /work/locks/slurm.lock` (fixed ports).
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
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
    # The console script's module (pyproject): user caps and restore, and prolog/epilog.
    return subprocess.run([sys.executable, "-m", "hpcai.launcher.power.helper_command", *args],
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


# ---- the real path: sudo, the docs' sudoers rule and epilog line -------------------------------
HELPER = Path(sys.executable).parent / "hpcai-power-helper"  # the installed console script
SUDOERS_D = Path("/etc/sudoers.d")


@pytest.fixture
def stranger():
    """A second real unprivileged user, with no job on the node."""
    name = f"hpcai{uuid_module.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def install_sudoers(name: str, text: str) -> Path:
    """A drop-in as an admin installs one: checked by `visudo -cf` first, then root, 0440."""
    draft = SUDOERS_D / f".{name}.draft"  # sudo skips names with a dot
    draft.write_text(text)
    os.chmod(draft, 0o440)
    checked = subprocess.run(["visudo", "-cf", str(draft)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    path = SUDOERS_D / name
    os.replace(draft, path)
    return path


@pytest.fixture
def sudoers(gpus):
    """The docs' sudoers rule for the installed helper, in /etc/sudoers.d, removed after.
    A second drop-in, for this test only, keeps the two variables that put the FAKE
    GPU library (tests/fakes) in place of the real one; a real site has no such line."""
    if shutil.which("sudo") is None or shutil.which("visudo") is None:
        pytest.fail("sudo is not installed: run `make setup-system` (as root)")
    SUDOERS_D.mkdir(mode=0o755, exist_ok=True)
    rule = install_sudoers("hpcai-power-helper-test", helper.SUDOERS_LINE.format(helper=HELPER) + "\n")
    fake = install_sudoers("hpcai-power-helper-test-fake-gpus",
                           f'Defaults!{HELPER} env_keep += "HPCAI_FAKE_GPU_STATE PYTHONPATH"\n')
    try:
        yield rule
    finally:
        rule.unlink(missing_ok=True)
        fake.unlink(missing_ok=True)


def as_user(user, state: Path, *command: str) -> subprocess.CompletedProcess:
    """`runuser -u USER -- sudo -n ...`: the user's own process, through the real sudo."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(FAKES),
           "HPCAI_FAKE_GPU_STATE": str(state), "SLURM_JOB_ID": "1"}
    return subprocess.run(["runuser", "-u", user.pw_name, "--", "sudo", "-n", *command],
                          capture_output=True, text=True, env=env, timeout=300, cwd="/tmp")


def test_docs_show_the_sudoers_and_epilog_lines_the_test_uses():
    lines = [line.strip() for line in (ROOT / "docs" / "how-to" / "power-helper.md").read_text().splitlines()]
    installed = "/opt/hpcai/bin/hpcai-power-helper"
    assert helper.SUDOERS_LINE.format(helper=installed) in lines
    assert helper.EPILOG_LINE.format(helper=installed) in lines


def test_a_user_caps_their_job_gpu_through_real_sudo_and_the_epilog_line_restores(
        slurm_cluster, traversable, helper_config, user, stranger, gpus, sudoers, tmp_path):
    state, uuids = gpus
    job = submit_as(slurm_cluster, user, "--exclusive", "-N1", "--wrap", "sleep 600")
    try:
        wait_running(slurm_cluster, job)

        # sudo lets the users run the helper and nothing else.
        done = as_user(user, state, "/bin/true")
        assert done.returncode != 0 and "password is required" in done.stderr, done.stderr

        # A user with no job here (SLURM_JOB_ID in their environment is ignored): refused.
        done = as_user(stranger, state, str(HELPER), uuids[0], "300")
        assert done.returncode != 0, done.stdout
        assert f"user {stranger.pw_uid} has no running Slurm job on this node holding GPU 0" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and limits(state) == [700.0, 700.0]

        # The job's owner, through sudo: set for their job (SUDO_UID came from sudo).
        done = as_user(user, state, str(HELPER), uuids[0], "300")
        assert done.returncode == 0, done.stderr
        assert f"for Slurm job {job}" in done.stdout and limits(state) == [300.0, 700.0]
        record = authority.read_private_json(authority.LOCK_ROOT / f"gpu-{uuids[0]}.job.json")
        assert record["uid"] == user.pw_uid and record["job_id"] == job

        # Another user may not restore (undo) a job that is not theirs.
        done = as_user(stranger, state, str(HELPER), "restore", "--job", job)
        assert done.returncode != 0 and f"Slurm job {job} is not yours" in done.stderr, done.stderr
        assert limits(state) == [300.0, 700.0]

        # A root launcher (a real CapSession, tests/authority_child.py) on the job's GPU:
        # the helper holds no lock now, but Slurm still runs the job: refused, nothing set.
        code, _, err = root_launcher(state, tmp_path / "root-a", 400)
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert f"capped for Slurm job {job} of user {user.pw_name}" in err
        assert limits(state) == [300.0, 700.0]

        # The docs' epilog line, as slurmd runs it: root, SLURM_JOB_ID set.
        epilog = helper.EPILOG_LINE.format(helper=HELPER)
        done = subprocess.run(["sh", "-c", epilog], capture_output=True, text=True, timeout=300,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_JOB_ID": job,
                                   "PYTHONPATH": str(FAKES), "HPCAI_FAKE_GPU_STATE": str(state)})
        assert done.returncode == 0, done.stderr
        assert limits(state) == [700.0, 700.0]
        assert not (authority.LOCK_ROOT / f"gpu-{uuids[0]}.job.json").exists()

        # Capped again, then the job ends without the epilog's restore: its record is
        # stale. A root run proceeds and restores the first original, not the job's cap.
        assert as_user(user, state, str(HELPER), uuids[0], "300").returncode == 0
        slurm_cluster.run("scancel", job)
        wait_ended(slurm_cluster, job)
        _, out, err = root_launcher(state, tmp_path / "root-b", 400, hold_s=0)
        assert "READY" in out, err  # capped at 400 W while it ran (root_launcher checks)
        assert limits(state) == [700.0, 700.0]
        assert not (authority.LOCK_ROOT / f"gpu-{uuids[0]}.job.json").exists()
    finally:
        slurm_cluster.run("scancel", job)


def wait_ended(cluster, job_id: str, timeout: float = 120) -> None:
    from hpcai.launcher.power.job_caps import LIVE_STATES

    deadline = time.monotonic() + timeout
    while cluster.state(job_id) in LIVE_STATES | {"PENDING"}:
        assert time.monotonic() < deadline, f"job {job_id} still {cluster.state(job_id)}"
        time.sleep(0.5)


def root_launcher(state: Path, folder: Path, cap_w: float, hold_s: float | None = None):
    """A root CapSession in its own process on the FAKE GPUs. It is refused at once,
    or (hold_s given) prints READY once capped and is stopped (SIGTERM: restores)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(FAKES),
           "HPCAI_FAKE_GPU_STATE": str(state)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "authority_child.py"),
                             str(folder / "power-journal.json"), str(cap_w), "all"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        if hold_s is not None:
            line = proc.stdout.readline()
            if line.strip() == "READY":
                assert limits(state) == [cap_w, cap_w]
                proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=300)
            return proc.returncode, line + out, err
        out, err = proc.communicate(timeout=300)
        return proc.returncode, out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
