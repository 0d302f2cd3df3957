"""Issue 42 §2: the site's [policy] applied by Slurm's Prolog through
hpcai-power-helper, restored by its Epilog, on the real two-node Slurm
(tests/slurm_fixtures.py) with a real unprivileged user's jobs.

slurm.conf gets the Prolog= and Epilog= scripts with the docs' lines
(`hpcai-power-helper prolog` / `epilog`), and slurmd runs them as root for
each job. The GPU library is the FAKE pynvml (tests/fakes): the scripts'
first line puts it in place of the real one, which a real site's lacks.

Run under `flock /tmp/hpcai-services.lock` (fixed ports).
"""
from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fakes import fake_gpu_state as fgs
from conftest import FAKES, ROOT
from hpcai.launcher.power import authority, helper, prolog
from test_power_helper_slurm import gpus, limits, run_helper, submit_as, traversable, user, wait_ended  # noqa: F401

pytestmark = pytest.mark.slow
HELPER = Path(sys.executable).parent / "hpcai-power-helper"  # the installed console script

SITE = """\
name = "policy-ci"

[power]
allowed_cap_range_w = [250, 600]

[[classes]]
name = "llm"
workload = "llama3-8b-pretrain"
job_name = "llama*"

[[classes]]
name = "tuned"
workload = "resnet50"
job_name = "tuned*"

[[classes]]
name = "served"
workload = "llama3-8b-inference"
job_name = "serve*"

[policy]
plan = "sha256:0"

[[policy.default]]
partition = "ci"
gpu = "H100"
cap_w = 450.0

[[policy.override]]
partition = "ci"
gpu = "H100"
class = "llm"
cap_w = 600.0

[[policy.override]]
partition = "ci"
gpu = "H100"
class = "tuned"
sm_clock_mhz = 1410

[[policy.override]]
partition = "ci"
gpu = "H100"
class = "served"
power_profile = "max-q"
"""


@pytest.fixture
def folder():
    """Root's own folder for the site file and the scripts slurmd runs (not under pytest's
    tmp_path base, which other pytest sessions prune)."""
    path = Path(tempfile.mkdtemp(prefix="hpcai-policy-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def policy_config(slurm_cluster, folder):
    """The helper's settings naming a root-owned site file with a [policy]."""
    site = folder / "site.toml"
    site.write_text(SITE)
    os.chmod(site, 0o644)
    path = helper.HELPER_CONFIG
    saved = path.read_bytes() if path.exists() else None
    path.parent.mkdir(mode=0o755, exist_ok=True)
    path.write_text(f'slurm_conf = "{slurm_cluster.conf}"\nsite = "{site}"\n')
    os.chmod(path, 0o644)
    yield path
    if saved is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(saved)


@pytest.fixture
def prolog_epilog(slurm_cluster, gpus, folder):  # noqa: F811
    """Prolog= and Epilog= scripts with the docs' lines in slurm.conf (reconfigured,
    then put back); each appends its exit status to a log the test reads."""
    state, _ = gpus
    log = folder / "prolog-epilog.log"
    conf_text = slurm_cluster.conf.read_text()
    lines = []
    for kind, line in (("prolog", prolog.PROLOG_LINE), ("epilog", prolog.EPILOG_LINE)):
        script = folder / f"{kind}.sh"
        script.write_text("#!/bin/sh\n"
                          f"export PYTHONPATH={FAKES} HPCAI_FAKE_GPU_STATE={state}  # test only: the FAKE GPUs\n"
                          f"{line.format(helper=HELPER)} >>{log} 2>&1\n"
                          f'rc=$?; echo "{kind} $SLURM_JOB_ID rc=$rc" >>{log}; exit $rc\n')
        os.chmod(script, stat.S_IRWXU)
        lines.append(f"{kind.capitalize()}={script}\n")
    slurm_cluster.conf.write_text(conf_text + "".join(lines))
    done = slurm_cluster.run("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr
    try:
        yield log
    finally:
        slurm_cluster.conf.write_text(conf_text)
        slurm_cluster.run("scontrol", "reconfigure")


def wait_logged(log: Path, entry: str, timeout: float = 120) -> None:
    """Until the script's exit line is in the log (slurmd runs it when it runs it)."""
    deadline = time.monotonic() + timeout
    while entry not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"no {entry!r} in the log:\n{log.read_text() if log.exists() else ''}"
        time.sleep(0.3)


def job_record(uuid: str) -> dict | None:
    return authority.read_private_json(authority.LOCK_ROOT / f"gpu-{uuid}.job.json")


def test_docs_show_the_prolog_and_epilog_lines_the_test_uses():
    lines = [line.strip() for line in (ROOT / "docs" / "how-to" / "power-helper.md").read_text().splitlines()]
    installed = "/opt/hpcai/bin/hpcai-power-helper"
    assert prolog.PROLOG_LINE.format(helper=installed) in lines
    assert prolog.EPILOG_LINE.format(helper=installed) in lines


def test_the_prolog_applies_the_policy_a_users_cap_wins_and_the_epilog_restores(
        slurm_cluster, traversable, policy_config, prolog_epilog, user, gpus):  # noqa: F811
    state, uuids = gpus
    log = prolog_epilog

    # A job that sets no cap: the partition's default for the GPUs' model (H100), for its owner.
    job = submit_as(slurm_cluster, user, "--exclusive", "-N1", "--job-name", "resnet", "--wrap", "sleep 600")
    try:
        wait_logged(log, f"prolog {job} rc=0")
        assert limits(state) == [450.0, 450.0], log.read_text()
        assert "(the default for partition ci on H100)" in log.read_text()
        record = job_record(uuids[0])
        assert record["job_id"] == job and record["uid"] == user.pw_uid and record["user"] == user.pw_name
        assert authority.original_of(uuids[0])["limit_w"] == 700.0
    finally:
        slurm_cluster.run("scancel", job)
    wait_ended(slurm_cluster, job)
    wait_logged(log, f"epilog {job} rc=0")
    assert limits(state) == [700.0, 700.0]
    assert job_record(uuids[0]) is None and authority.original_of(uuids[0]) is None

    # A job of the class "llm" (job name llama*): its override; its user's own cap then wins.
    job = submit_as(slurm_cluster, user, "--exclusive", "-N1", "--job-name", "llama-8b", "--wrap", "sleep 600")
    try:
        wait_logged(log, f"prolog {job} rc=0")
        assert limits(state) == [600.0, 600.0], log.read_text()
        done = run_helper(state, uuids[0], "300", sudo_uid=user.pw_uid)
        assert done.returncode == 0, done.stderr
        assert limits(state) == [300.0, 600.0]
        assert authority.original_of(uuids[0])["limit_w"] == 700.0  # the GPU's, not the prolog's
    finally:
        slurm_cluster.run("scancel", job)
    wait_ended(slurm_cluster, job)
    wait_logged(log, f"epilog {job} rc=0")
    assert limits(state) == [700.0, 700.0]
    assert all(job_record(u) is None for u in uuids)


def test_the_prolog_locks_a_clock_or_requests_a_profile_and_the_epilog_puts_them_back(
        slurm_cluster, traversable, policy_config, prolog_epilog, user, gpus):  # noqa: F811
    """The plan's other knobs (launcher/planner/curves.py): an override's SM clock lock
    and power profile, set through the FAKE NVML's locked-clock and workload-profile
    calls, kept when the job's user sets a cap of their own, put back by the epilog."""
    state, uuids = gpus
    log = prolog_epilog
    devices = fgs.read_state(state)["devices"]
    for dev in devices:  # boards that offer MAX_P, MAX_Q and COMPUTE, MAX_P requested
        dev.update(power_profiles=[0, 1, 2], requested_profiles=[0])
    fgs.write_state(state, devices)

    def device(i: int) -> dict:
        return fgs.read_state(state)["devices"][i]

    job = submit_as(slurm_cluster, user, "--exclusive", "-N1", "--job-name", "tuned-cfd", "--wrap", "sleep 600")
    try:
        wait_logged(log, f"prolog {job} rc=0")
        # Locked between the lowest supported clock and the policy's (hpcai/gpu/clocks.py).
        assert [device(i)["clock_limits"]["sm"] for i in (0, 1)] == [[345, 1410]] * 2, log.read_text()
        assert "SM clock 1410 MHz for Slurm job" in log.read_text()
        assert job_record(uuids[0])["knob"]["kind"] == "sm_clock_mhz"
        assert limits(state) == [700.0, 700.0]  # the override sets the clock, not a cap
        done = run_helper(state, uuids[0], "400", sudo_uid=user.pw_uid)  # the user's own cap
        assert done.returncode == 0, done.stderr
        assert job_record(uuids[0])["knob"]["kind"] == "sm_clock_mhz"  # still there for the epilog
    finally:
        slurm_cluster.run("scancel", job)
    wait_ended(slurm_cluster, job)
    wait_logged(log, f"epilog {job} rc=0")
    assert [device(i)["clock_limits"]["sm"] for i in (0, 1)] == [None, None], log.read_text()
    assert limits(state) == [700.0, 700.0]
    assert all(job_record(u) is None for u in uuids)

    job = submit_as(slurm_cluster, user, "--exclusive", "-N1", "--job-name", "serve-llm", "--wrap", "sleep 600")
    try:
        wait_logged(log, f"prolog {job} rc=0")
        assert [device(i)["requested_profiles"] for i in (0, 1)] == [[1], [1]], log.read_text()
        assert "power profile max-q for Slurm job" in log.read_text()
    finally:
        slurm_cluster.run("scancel", job)
    wait_ended(slurm_cluster, job)
    wait_logged(log, f"epilog {job} rc=0")
    assert [device(i)["requested_profiles"] for i in (0, 1)] == [[0], [0]], log.read_text()
    assert all(job_record(u) is None for u in uuids)


def test_prolog_and_epilog_refuse_arguments_sudo_and_a_bad_job_id(gpus):  # noqa: F811
    state, _ = gpus
    done = run_helper(state, "epilog", "--job", "5", sudo_uid=None)
    assert done.returncode == 2 and "epilog takes no arguments (the job is SLURM_JOB_ID)" in done.stderr
    # A user through sudo may not apply (or undo) the policy for a job id of their choosing.
    done = run_helper(state, "prolog", sudo_uid=1000, extra_env={"SLURM_JOB_ID": "5"})
    assert done.returncode == 2 and "prolog is for Slurm's Prolog= script, run as root" in done.stderr
    done = run_helper(state, "prolog", sudo_uid=None, extra_env={"SLURM_JOB_ID": "5; reboot"})
    assert done.returncode == 2 and "SLURM_JOB_ID '5; reboot' is not a Slurm job id" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert limits(state) == [700.0, 700.0]
