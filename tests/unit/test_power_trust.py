"""Issue 40, "Caps left applied" and the helper's security items: trust at the
power boundary.

The GPU library is the FAKE pynvml (tests/fakes); "launchers" are real
processes (tests/authority_child.py) with real flocks under the fixed
/run/hpcai, isolated by their fake GPUs' own UUIDs (test_cap_authority.Node).
Slurm's answers to hpcai-power-helper are stubbed at the helper's one question
(helper.caller_job_holding: which running job of the caller holds this GPU),
as test_cap_authority stubs job_caps.slurm_job_live.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hpcai.errors import ConfigError, PowerError
from hpcai.launcher.power import authority, helper
from hpcai.launcher.power.authority import GpuAuthority, original_of
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.session import restore_from_journal

from fakes import fake_gpu_state as fgs
from test_cap_authority import Node, finish, helper_capped, ready

JOB = "40401"
USER = 1001


@pytest.fixture
def node(tmp_path, monkeypatch):
    made = Node(tmp_path, monkeypatch)
    yield made
    made.cleanup()


def lock_files(node, index: int) -> list:
    uuid = node.uuids[index]
    return [authority.LOCK_ROOT / f"gpu-{uuid}.{suffix}" for suffix in ("lock", "holder.json", "original.json")]


# ---- 1. the lock folder removed or replaced while a run holds it ----------------------------
def test_a_lock_removed_under_its_holder_still_refuses_a_second_run(node):
    """Fault: `rm -rf /run/hpcai` (the old hint) while a run held its GPUs: a second
    run locked new files at the same paths, capped the same GPUs at once and took
    the first run's cap for the original. The first holder's lock, on a removed
    file, is found through the kernel (/proc/locks, /proc/PID/fd)."""
    first = node.start(node.journal("home-a"), 300, run_id="run-a")
    try:
        ready(first)
        for index in (0, 1):  # what removing the folder does to these GPUs' files
            for path in lock_files(node, index):
                path.unlink(missing_ok=True)
        code, err = finish(node.start(node.journal("home-b"), 400, run_id="run-b"))
        lines = [line for line in err.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1, err
        assert "held by another run" in lines[0] and f"pid {first.pid}" in lines[0]
        assert "was removed under it" in lines[0]
        assert node.limits() == [300.0, 300.0]
        assert all(original_of(u) is None for u in node.uuids)  # no second "original" recorded
    finally:
        first.send_signal(signal.SIGTERM)
        finish(first)
    assert node.limits() == [700.0, 700.0]


def test_a_run_waiting_on_a_removed_lock_follows_the_path_and_restores_the_true_original(node):
    """The waiting run's lock must be on the file the path names when it gets it:
    queued behind the first run, whose lock files are removed, it caps only after
    the first run has ended and at its end puts back 700 W, never the first's cap."""
    first = node.start(node.journal("a"), 300, run_id="run-a")
    ready(first)
    second = node.start(node.journal("b"), 400, wait_s=120, run_id="run-b")
    time.sleep(1.0)
    for index in (0, 1):
        for path in lock_files(node, index):
            path.unlink(missing_ok=True)
    time.sleep(1.0)
    assert second.poll() is None and node.limits() == [300.0, 300.0]  # still queued
    first.send_signal(signal.SIGTERM)
    finish(first)
    ready(second)
    assert node.limits() == [400.0, 400.0]
    assert [original_of(u)["limit_w"] for u in node.uuids] == [700.0, 700.0]
    second.send_signal(signal.SIGTERM)
    finish(second)
    assert node.limits() == [700.0, 700.0]


def test_a_lock_replaced_between_open_and_flock_is_not_trusted(node, monkeypatch):
    """The path must still name the locked file after the flock: here the file is
    replaced just after this run opened it; the lock is taken on the new one."""
    uuid = node.uuids[0]
    path = authority.LOCK_ROOT / f"gpu-{uuid}.lock"
    real_open, replaced = authority._open_lock, []

    def open_then_replace(lock_path):
        fd = real_open(lock_path)
        if not replaced:
            replaced.append(os.fstat(fd).st_ino)
            os.unlink(lock_path)
            os.close(os.open(lock_path, os.O_CREAT | os.O_WRONLY, 0o600))
        return fd

    monkeypatch.setattr(authority, "_open_lock", open_then_replace)
    with GpuAuthority([uuid], "run") as held:
        assert os.fstat(held._fds[uuid]).st_ino == os.stat(path).st_ino != replaced[0]


def test_the_hint_for_a_bad_lock_folder_no_longer_says_remove_it(tmp_path):
    bad = tmp_path / "authority"
    bad.mkdir(mode=0o777)
    bad.chmod(0o777)
    with pytest.raises(PowerError) as raised:
        authority.check_private_dir(bad, create=False)
    line = raised.value.one_line()
    assert "rm -rf" not in line and "no hpcai run" in line and "mv " in line


# ---- 2. the helper racing the job's end ------------------------------------------------------
def helper_node(node, monkeypatch, answers):
    """Slurm's answers, in order, to "which running job of this user holds GPU i"."""
    asked = []

    def caller_job_holding(config, uid, index):
        asked.append(index)
        answer = answers[min(len(asked), len(answers)) - 1]
        if answer is None:
            raise PowerError(f"user {uid} has no running Slurm job on this node holding GPU {index}")
        return answer

    monkeypatch.setattr(helper, "caller_job_holding", caller_job_holding)
    return asked


def test_a_cap_asked_as_the_job_ends_is_refused_after_the_lock(node, monkeypatch):
    """Fault: Slurm said RUNNING, the job ended while the helper took the lock, and
    the cap landed after the epilog. Asked again under the lock: nothing changes."""
    asked = helper_node(node, monkeypatch, [JOB, None])
    with pytest.raises(PowerError, match="no running Slurm job"):
        helper.set_limit(node.uuids[0], 300.0, USER, {})
    assert len(asked) == 2 and node.limits() == [700.0, 700.0]
    assert not helper._job_record_path(node.uuids[0]).exists()


def test_a_job_that_ends_just_after_its_cap_lands_gets_its_limit_back(node, monkeypatch):
    helper_node(node, monkeypatch, [JOB, JOB, None])
    with pytest.raises(PowerError, match="ended while GPU .* was being capped"):
        helper.set_limit(node.uuids[0], 300.0, USER, {})
    assert node.limits() == [700.0, 700.0]
    assert not helper._job_record_path(node.uuids[0]).exists() and original_of(node.uuids[0]) is None


def test_the_epilog_reads_the_records_under_the_gpu_lock(node):
    """Fault: the epilog read the job records without the lock, found none while a
    set was under way, and the cap landed after it: the GPU stayed capped. Now it
    waits for the set's lock and restores what the set left."""
    uuid = node.uuids[0]
    done: list = []
    with GpuAuthority([uuid], f"slurm-job-{JOB}", job_id=JOB) as held:  # a set under way
        epilog = threading.Thread(target=lambda: done.append(helper.restore_job(JOB, None, {})))
        epilog.start()
        time.sleep(1.0)  # the epilog is looking now
        held.original_w(uuid, 700.0)
        fgs.update_device(node.state, 0, current_limit_w=300.0)
        authority.write_private_json(helper._job_record_path(uuid), dict(held.holder_record(), uid=USER))
    epilog.join(timeout=60)
    assert done == [[f"GPU {uuid}: restored to 700 W"]]
    assert node.limits() == [700.0, 700.0] and not helper._job_record_path(uuid).exists()


# ---- 3. the epilog with one of the job's GPUs lost -------------------------------------------
def test_the_epilog_restores_every_healthy_gpu_then_reports_the_lost_one(node):
    """Fault: the epilog stopped at a lost GPU (the first, in UUID order) and left
    the job's healthy GPUs capped."""
    helper_capped(node, 0, 300.0, job_id=JOB)
    helper_capped(node, 1, 350.0, job_id=JOB)
    fgs.update_device(node.state, 0, inaccessible="gpu_is_lost")
    with pytest.raises(PowerError) as raised:
        helper.restore_job(JOB, None, {})
    line = raised.value.one_line()
    assert f"GPU {node.uuids[1]}: restored to 700 W; could not restore" in line
    assert f"GPU {node.uuids[0]}: it is unreachable" in line and "once the GPU is back" in line
    assert node.limits()[1] == 700.0
    assert helper._job_record_path(node.uuids[0]).exists()  # kept for a later restore
    assert not helper._job_record_path(node.uuids[1]).exists()


# ---- 4. `power restore` with a lost GPU --------------------------------------------------------
def test_power_restore_with_a_lost_gpu_keeps_the_journal_and_restores_the_others(node):
    """Fault: it told the user to delete the journal of a GPU that is merely lost,
    and still capped, and restored nothing."""
    journal = node.journal("home")
    dead = node.start(journal, 300)
    ready(dead)
    dead.kill()
    dead.wait()
    fgs.update_device(node.state, 1, inaccessible="gpu_is_lost")
    with make_backend("nvml") as backend, pytest.raises(PowerError) as raised:
        restore_from_journal(backend, journal)
    line = raised.value.one_line()
    assert "delete" not in line and "unreachable" in line and "GPU is lost" in line
    assert "keep the journal" in line
    assert journal.exists()
    assert node.limits() == [700.0, 300.0]  # the healthy one restored


# ---- 5. the helper's range, whatever the board's default ---------------------------------------
def test_the_helper_never_raises_a_gpu_above_the_site_range_at_the_default(node, monkeypatch):
    """Fault: a request equal to the board's default (700 W) skipped the site's
    allowed range and an admin's node cap (500 W)."""
    helper_node(node, monkeypatch, [JOB])
    fgs.update_device(node.state, 0, current_limit_w=500.0)  # the admin's node cap
    with pytest.raises(PowerError, match="outside the site's allowed caps 200-600 W"):
        helper.set_limit(node.uuids[0], 700.0, USER, {"allowed_cap_range_w": [200, 600]})
    with pytest.raises(PowerError, match="above the GPU's limit before any job's cap"):
        helper.set_limit(node.uuids[0], 550.0, USER, {"allowed_cap_range_w": [200, 600]})
    with pytest.raises(PowerError, match="above the GPU's limit before any job's cap"):
        helper.set_limit(node.uuids[0], 700.0, USER, {})
    assert node.limits()[0] == 500.0
    helper.set_limit(node.uuids[0], 300.0, USER, {"allowed_cap_range_w": [200, 600]})
    helper.set_limit(node.uuids[0], 500.0, USER, {"allowed_cap_range_w": [200, 600]})  # put back
    assert node.limits()[0] == 500.0 and original_of(node.uuids[0]) is None


# ---- 6. the helper's config folder --------------------------------------------------------------
def test_a_missing_helper_config_in_a_folder_others_can_write_is_an_error(tmp_path):
    """Fault: deleting the file from a user-writable folder removed every limit."""
    folder = tmp_path / "etc-hpcai"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match="can be written by other users"):
        helper.load_config(folder / "power-helper.toml")
    config = folder / "power-helper.toml"
    config.write_text("allowed_cap_range_w = [200, 600]\n")
    config.chmod(0o644)
    with pytest.raises(ConfigError, match="can be written by other users"):
        helper.load_config(config)
    folder.chmod(0o755)
    assert helper.load_config(config)["allowed_cap_range_w"] == [200, 600]
    config.unlink()
    assert helper.load_config(config) == {}  # absent from a trusted folder: no limits


# ---- 7. --wait-for-gpus queues runs of one user -------------------------------------------------
def test_wait_for_gpus_queues_a_run_with_the_same_journal(node):
    """Fault: the second run of one user (same journal) was refused by the journal
    check, told to run `power restore` while the first was live."""
    journal = node.journal("home")
    first = node.start(journal, 300, gpus="0", run_id="run-a")
    ready(first)
    second = node.start(journal, 400, gpus="1", wait_s=120, run_id="run-b")
    time.sleep(1.5)
    assert second.poll() is None, second.stderr.read()  # queued, not refused
    assert node.limits() == [300.0, 700.0]
    first.send_signal(signal.SIGTERM)
    finish(first)
    ready(second)
    assert node.limits() == [700.0, 400.0]
    second.send_signal(signal.SIGTERM)
    finish(second)
    assert node.limits() == [700.0, 700.0] and not journal.exists()


def test_a_dead_runs_journal_is_still_refused_when_waiting(node):
    journal = node.journal("home")
    dead = node.start(journal, 300)
    ready(dead)
    dead.kill()
    dead.wait()
    code, err = finish(node.start(journal, 400, wait_s=30))
    assert code != 0 and "power journal from an earlier run" in err and "power restore" in err
