"""Issue 25, section 1: one node-wide authority over GPU limits.

The GPU library is the FAKE pynvml (tests/fakes); every "launcher" here is a
real process (tests/authority_child.py) holding a real CapSession, with real
flocks under the fixed /run/hpcai. Each test's fake node has GPUs with UUIDs
of its own (fake_gpu_state.make_devices), as a real node's are, so tests never
contend for a lock.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcai.launcher.power import authority
from hpcai.launcher.power.authority import GpuAuthority, holder_of, original_of
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.session import CapSession

from conftest import FAKES, ROOT
from fakes import fake_gpu_state as fgs
from processes import new_mark, popen_options, kill_marked

CHILD = ROOT / "tests" / "authority_child.py"


class Node:
    """A FAKE GPU node shared by this test process and the children it starts."""

    def __init__(self, tmp: Path, monkeypatch, n: int = 2):
        self.tmp, self.state = tmp, tmp / "gpus.json"
        self.modules = fgs.install(monkeypatch, self.state, fgs.make_devices(n, "nvidia"))
        self.uuids = [d["uuid"] for d in fgs.read_state(self.state)["devices"]]
        self.mark = new_mark()
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKES), str(ROOT / "tests")]),
                        HPCAI_FAKE_GPU_STATE=str(self.state))

    def limits(self) -> list[float]:
        return [d["current_limit_w"] for d in fgs.read_state(self.state)["devices"]]

    def journal(self, name: str) -> Path:
        folder = self.tmp / name
        return folder / "power-journal-test.json"

    def start(self, journal: Path, cap: float, gpus: str = "all", wait_s: float = 0,
              run_id: str = "child", env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(CHILD), str(journal), str(cap), gpus, str(wait_s), run_id],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                **popen_options(env or self.env, self.mark))

    def cleanup(self) -> None:
        kill_marked(self.mark)
        for uuid in self.uuids:  # this node's records; its UUIDs are its own
            for suffix in ("lock", "holder.json", "original.json", "job.json"):
                Path(authority.LOCK_ROOT / f"gpu-{uuid}.{suffix}").unlink(missing_ok=True)


@pytest.fixture
def node(tmp_path, monkeypatch):
    made = Node(tmp_path, monkeypatch)
    yield made
    made.cleanup()


def ready(proc: subprocess.Popen, timeout: float = 120) -> None:
    """Wait for READY; fail with the child's stderr if it ended instead."""
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.wait(timeout=timeout)
        raise AssertionError(f"child did not get its cap: {proc.stderr.read()}")


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def test_fake_nodes_have_unique_gpu_uuids():
    """The precondition of isolating tests by UUID, as real nodes are."""
    a, b = fgs.make_devices(2), fgs.make_devices(2)
    uuids = [d["uuid"] for d in a + b]
    assert len(set(uuids)) == 4


def test_second_run_with_another_journal_is_refused_naming_the_holder(node):
    """Fault: two capped runs whose journals live in different places both
    proceeded, and the second took the first's cap as the 'original'."""
    first = node.start(node.journal("home-a"), 300, run_id="run-a")
    try:
        ready(first)
        second = node.start(node.journal("home-b"), 400, run_id="run-b")
        code, err = finish(second)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1, err
        assert "is held by another run" in lines[0]
        assert f"pid {first.pid}" in lines[0] and "run run-a" in lines[0] and "user root" in lines[0]
        assert "--wait-for-gpus" in lines[0]
        assert node.limits() == [300.0, 300.0]  # the first run's cap, untouched
        assert not node.journal("home-b").exists()
    finally:
        first.send_signal(signal.SIGTERM)
        finish(first)
    assert node.limits() == [700.0, 700.0]  # the true original, restored
    assert all(original_of(u) is None for u in node.uuids)  # the record goes with it


def test_after_a_holder_dies_the_next_run_restores_the_first_original(node):
    """The original is the first holder's, never a dead run's cap: a SIGKILLed
    run leaves 300 W applied; the next run (another journal) caps at 400 W and
    at its end puts back 700 W, the limit from before either run."""
    dead = node.start(node.journal("home-a"), 300)
    ready(dead)
    dead.kill()
    dead.wait()
    assert node.limits() == [300.0, 300.0]
    assert [original_of(u)["limit_w"] for u in node.uuids] == [700.0, 700.0]
    with make_backend("nvml") as backend:
        with CapSession(backend, 400, None, node.journal("home-b"), run_id="next") as session:
            assert node.limits() == [400.0, 400.0]
            assert holder_of(node.uuids[0])["run_id"] == "next"
    assert node.limits() == [700.0, 700.0]
    assert [g["restored_w"] for g in session.gpus.values()] == [700.0, 700.0]
    assert holder_of(node.uuids[0]) is None


def test_wait_for_gpus_queues_behind_the_holder(node):
    first = node.start(node.journal("a"), 300)
    ready(first)
    second = node.start(node.journal("b"), 400, wait_s=120)
    time.sleep(1.0)
    assert second.poll() is None  # waiting, not refused
    assert node.limits() == [300.0, 300.0]
    first.send_signal(signal.SIGTERM)
    finish(first)
    ready(second)
    assert node.limits() == [400.0, 400.0]
    second.send_signal(signal.SIGTERM)
    finish(second)
    assert node.limits() == [700.0, 700.0]


def test_waiting_runs_out_in_one_line(node):
    first = node.start(node.journal("a"), 300)
    try:
        ready(first)
        code, err = finish(node.start(node.journal("b"), 400, wait_s=1))
        assert code != 0 and "after waiting 1 s" in err and f"pid {first.pid}" in err
    finally:
        first.kill()
        first.wait()


def test_locks_are_taken_in_sorted_order_so_overlapping_runs_never_deadlock(node):
    """GPUs {0,1} and {1,0}: whichever wins, the other is refused or waits; both end."""
    a = node.start(node.journal("a"), 300, gpus="0,1", wait_s=120)
    b = node.start(node.journal("b"), 400, gpus="1,0", wait_s=120)
    waiting = {a.stdout.fileno(): a, b.stdout.fileno(): b}
    while waiting:  # whichever gets both GPUs first is stopped; then the other gets them
        ready_fds, _, _ = select.select(list(waiting), [], [], 180)
        assert ready_fds, "neither run got its GPUs: a deadlock"
        proc = waiting.pop(ready_fds[0])
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    assert node.limits() == [700.0, 700.0]


@pytest.mark.parametrize("same_gpus", [True, False])
def test_same_journal_race_never_lets_two_runs_cap(node, same_gpus):
    """Fault: with one journal, a check-then-write race let two launchers cap
    at once about one time in four. 20 tries of two launchers started together:
    exactly one caps, the other ends with a one-line error; limits come back."""
    journal = node.journal("shared")
    for attempt in range(20):
        gpus = ("0", "0") if same_gpus else ("0", "1")
        procs = [node.start(journal, 300 + 10 * k, gpus=g, run_id=f"r{attempt}-{k}")
                 for k, g in enumerate(gpus)]
        capped, refused = [], []
        for proc in procs:
            line = proc.stdout.readline().strip()
            (capped if line == "READY" else refused).append(proc)
        assert len(capped) == 1 and len(refused) == 1, f"attempt {attempt}: {len(capped)} capped"
        code, err = finish(refused[0])
        assert code != 0 and len(err.strip().splitlines()) == 1, err
        assert "held by another run" in err or "power journal" in err
        capped[0].send_signal(signal.SIGTERM)
        finish(capped[0])
        assert node.limits() == [700.0, 700.0], f"attempt {attempt}"
        assert not journal.exists()


def test_authority_folder_not_ours_is_refused(tmp_path):
    bad = tmp_path / "authority"
    bad.mkdir(mode=0o777)
    os.chmod(bad, 0o777)
    with pytest.raises(Exception, match="group- or world-writable"):
        GpuAuthority(["GPU-x"], "r", root=bad).__enter__()
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(Exception, match="symbolic link"):
        GpuAuthority(["GPU-x"], "r", root=link).__enter__()


def test_a_uuid_that_cannot_name_a_file_is_refused():
    with pytest.raises(Exception, match="cannot name a lock file"):
        GpuAuthority(["../../etc/passwd"], "r")


def test_holder_record_is_ignored_once_its_holder_died(node):
    proc = node.start(node.journal("a"), 300)
    ready(proc)
    assert holder_of(node.uuids[0])["pid"] == proc.pid
    proc.kill()
    proc.wait()
    assert holder_of(node.uuids[0]) is None  # the kernel dropped the flock


def test_uncapped_session_notes_the_holder(node):
    holder = node.start(node.journal("a"), 300, run_id="capper")
    try:
        ready(holder)
        with make_backend("nvml") as backend:
            with CapSession(backend, None, None, node.journal("b")) as session:
                pass
        held = [g["held_by"] for g in session.gpus.values()]
        assert all(h and "run capper" in h and f"pid {holder.pid}" in h for h in held)
    finally:
        holder.send_signal(signal.SIGTERM)
        finish(holder)


def test_a_limit_someone_else_set_during_the_run_is_left_and_recorded(node):
    """Fault: a limit changed by someone else during the run was silently
    overwritten at the end. Now: this run restores only what it set."""
    with make_backend("nvml") as backend:
        with CapSession(backend, 300, None, node.journal("a")) as session:
            fgs.update_device(node.state, 1, current_limit_w=450.0)  # an admin's nvidia-smi -pl
    assert node.limits() == [700.0, 450.0]
    assert session.gpus[0]["restored_w"] == 700.0 and session.gpus[0]["changed_during_run_w"] is None
    assert session.gpus[1]["restored_w"] is None and session.gpus[1]["changed_during_run_w"] == 450.0


def test_in_run_cap_changes_are_still_restored(node):
    """What this run set (every cap of an in-run sweep) is restored, not mistaken
    for someone else's change."""
    with make_backend("nvml") as backend:
        with CapSession(backend, 300, None, node.journal("a")) as session:
            session.change_cap(500)
    assert node.limits() == [700.0, 700.0]


def test_an_in_run_segment_is_named_in_each_held_gpus_holder_record(node):
    """The metrics exporter's hpcai_run_segment: the holding process adds the segment
    and its cap to its own records, keeping what they said before."""
    with make_backend("nvml") as backend:
        with CapSession(backend, 300, None, node.journal("a"), run_id="s-cap300W-inrun") as session:
            session.mark_segment(0, 300)
            session.change_cap(250)
            session.mark_segment(1, 250)
            records = [holder_of(u) for u in node.uuids]
    for record in records:
        assert (record["segment"], record["segment_cap_w"]) == (1, 250.0)
        assert record["run_id"] == "s-cap300W-inrun" and record["pid"] == os.getpid()
        assert "run s-cap300W-inrun" in authority.describe_holder(record)
    assert [holder_of(u) for u in node.uuids] == [None, None]  # released: no holder left


def test_the_power_helper_takes_the_lock_itself_so_the_launcher_does_not(node):
    """With hpcai-power-helper as the command, the helper locks each GPU per change;
    a root launcher holding the same lock for the run would make every call wait."""
    from hpcai.launcher.power.authority import authority_applies

    with make_backend("command", None, "sudo -n hpcai-power-helper {uuid} {watts}") as helper_backend:
        assert authority_applies(helper_backend) is False
    with make_backend("command", None, "sudo -n nvidia-smi -i {index} -pl {watts}") as other:
        assert authority_applies(other) is True  # root, any other command: the launcher locks
    with make_backend("nvml") as backend:
        assert authority_applies(backend) is True


# ---- caps hpcai-power-helper set for a user's Slurm job (launcher/power/job_caps.py) ----------
def helper_capped(node, index: int, cap_w: float, job_id: str = "4242") -> None:
    """What hpcai-power-helper leaves after capping a GPU for a job (helper.set_limit):
    the limit set, the first original and the job's record, and no lock held."""
    uuid = node.uuids[index]
    with GpuAuthority([uuid], f"slurm-job-{job_id}", job_id=job_id) as held:
        held.original_w(uuid, node.limits()[index])
        fgs.update_device(node.state, index, current_limit_w=cap_w)
        authority.write_private_json(authority.LOCK_ROOT / f"gpu-{uuid}.job.json",
                                     dict(held.holder_record(), uid=1001, user="alice"))


@pytest.mark.parametrize("clocks", [False, True])
def test_a_gpu_capped_for_a_running_job_is_refused_naming_job_and_user(node, monkeypatch, clocks):
    """Fault: the helper holds no lock after its one-shot cap, so a root run took
    the job's 300 W as the original and restored it over the job's head. Now the
    root run (a cap, or clocks: hold=True) is refused before anything changes.
    Slurm's answer is the stubbed boundary (job_caps.slurm_job_live)."""
    from hpcai.launcher.power import job_caps

    helper_capped(node, 1, 300.0)
    asked = []
    monkeypatch.setattr(job_caps, "slurm_job_live", lambda job: asked.append(job) or True)
    journal = node.journal("root")
    with make_backend("nvml") as backend:
        session = CapSession(backend, None if clocks else 400, None, journal, run_id="root-run", hold=clocks)
        with pytest.raises(job_caps.GpuCappedForJobError) as raised:
            session.__enter__()
    line = raised.value.one_line()
    assert "\n" not in line and "Slurm job 4242" in line and "user alice" in line
    assert node.uuids[1] in line and asked == ["4242"]
    assert node.limits() == [700.0, 300.0]  # nothing changed, the job's cap kept
    assert not journal.exists()
    assert holder_of(node.uuids[0]) is None and holder_of(node.uuids[1]) is None  # locks released
    assert (authority.LOCK_ROOT / f"gpu-{node.uuids[1]}.job.json").exists()


def prolog_locked(node, index: int, job_id: str = "4242", user_cap: bool = False) -> Path:
    """The job record the policy's prolog leaves after locking a GPU's SM clock
    (prolog.knob_job: set_by prolog, the clock's restore snapshot under "knob");
    user_cap: as helper.set_limit rewrites it when the job's user caps the GPU too."""
    uuid = node.uuids[index]
    with GpuAuthority([uuid], f"slurm-job-{job_id}-prolog", job_id=job_id) as held:
        record = dict(held.holder_record(), uid=1001, user="alice",
                      knob={"kind": "sm_clock_mhz", "restore": {"restore": "reset"}})
    if not user_cap:
        record["set_by"] = "prolog"
    path = authority.LOCK_ROOT / f"gpu-{uuid}.job.json"
    authority.write_private_json(path, record)
    return path


@pytest.mark.parametrize("user_cap, words", [
    (False, "has its SM clock locked for Slurm job 4242 of user alice (set by the site policy's prolog"),
    (True, "is capped and has its SM clock locked for Slurm job 4242 of user alice (set through "
           "hpcai-power-helper")], ids=["prolog-lock", "user-cap-over-it"])
def test_a_gpu_the_prolog_set_for_a_running_job_is_refused_saying_what_it_set(node, monkeypatch,
                                                                              user_cap, words):
    """A root run with --sm-clock (hold=True) inside a job whose policy locked the SM
    clock would reset it at its end (NVML cannot read a lock back): refused first,
    in words that say what the prolog set rather than "capped"."""
    from hpcai.launcher.power import job_caps

    record = prolog_locked(node, 0, user_cap=user_cap)
    monkeypatch.setattr(job_caps, "slurm_job_live", lambda job: True)
    journal = node.journal("root")
    with make_backend("nvml") as backend:
        with pytest.raises(job_caps.GpuCappedForJobError) as raised:
            CapSession(backend, None, None, journal, run_id="root-run", hold=True).__enter__()
    assert words in raised.value.one_line()
    assert record.exists() and not journal.exists() and holder_of(node.uuids[0]) is None


def test_an_ended_jobs_clock_lock_is_refused_and_its_record_kept_for_the_restore(node, monkeypatch):
    """The job ended and its epilog did not put the clock back. The stale record of a
    cap alone is removed (the original is kept apart), but this one is the only
    record of how to undo the lock: the run is refused, naming the restore, and the
    record stays for it."""
    from hpcai.launcher.power import job_caps

    record = prolog_locked(node, 1)
    monkeypatch.setattr(job_caps, "slurm_job_live", lambda job: False)
    with make_backend("nvml") as backend:
        with pytest.raises(job_caps.GpuCappedForJobError) as raised:
            CapSession(backend, 400, None, node.journal("root"), run_id="root-run").__enter__()
    line = raised.value.one_line()
    assert "has its SM clock locked for Slurm job 4242, which has ended" in line
    assert "hpcai-power-helper restore --job 4242" in line
    assert record.exists() and node.limits() == [700.0, 700.0]


def test_a_job_that_ended_leaves_a_stale_record_and_its_original_is_restored(node, monkeypatch):
    """The job ended without its epilog's restore: its cap (300 W) is still applied.
    The root run proceeds, and at its end restores the recorded original (700 W),
    never the job's cap; the stale job record is gone."""
    from hpcai.launcher.power import job_caps

    helper_capped(node, 0, 300.0)
    monkeypatch.setattr(job_caps, "slurm_job_live", lambda job: False)
    with make_backend("nvml") as backend:
        with CapSession(backend, 400, None, node.journal("root"), run_id="root-run") as session:
            assert node.limits() == [400.0, 400.0]
            assert not (authority.LOCK_ROOT / f"gpu-{node.uuids[0]}.job.json").exists()
    assert node.limits() == [700.0, 700.0]
    assert session.gpus[0]["restored_w"] == 700.0
    assert original_of(node.uuids[0]) is None


def test_slurm_not_answering_refuses_rather_than_guessing(node, monkeypatch):
    """An unknown job has ended; scontrol failing otherwise is not a 'no'."""
    from hpcai.errors import PowerError
    from hpcai.launcher.power import helper, job_caps

    def no_slurm(config, *args):
        raise PowerError("scontrol show job -o 4242 failed: Unable to contact slurm controller")

    monkeypatch.setattr(helper, "scontrol", no_slurm)
    monkeypatch.setattr(helper, "load_config", lambda: {})
    with pytest.raises(PowerError, match="cannot tell whether Slurm job 4242"):
        job_caps.slurm_job_live("4242")

    def purged(config, *args):
        raise PowerError("scontrol show job -o 4242 failed: slurm_load_jobs error: Invalid job id specified")

    monkeypatch.setattr(helper, "scontrol", purged)
    assert job_caps.slurm_job_live("4242") is False
    monkeypatch.setattr(helper, "scontrol", lambda config, *a: "JobId=4242 JobState=COMPLETING Partition=x\n")
    assert job_caps.slurm_job_live("4242") is True
    monkeypatch.setattr(helper, "scontrol", lambda config, *a: "JobId=4242 JobState=COMPLETED Partition=x\n")
    assert job_caps.slurm_job_live("4242") is False


def test_power_restore_leaves_a_running_jobs_cap_and_restores_an_ended_jobs(node, monkeypatch):
    """`power restore` as root (restore_originals: the node's records, no journal)
    would have lifted a running job's cap: its original.json has no live holder."""
    from hpcai.launcher.power import job_caps
    from hpcai.launcher.power.session import restore_originals

    helper_capped(node, 0, 300.0, job_id="4242")
    helper_capped(node, 1, 350.0, job_id="4343")
    monkeypatch.setattr(job_caps, "slurm_job_live", lambda job: job == "4242")
    with make_backend("nvml") as backend:
        done = restore_originals(backend)
    assert [d["uuid"] for d in done] == [node.uuids[1]]
    assert node.limits() == [300.0, 700.0]  # job 4242's cap stays; 4343 has ended
    assert original_of(node.uuids[0])["limit_w"] == 700.0
    assert not (authority.LOCK_ROOT / f"gpu-{node.uuids[1]}.job.json").exists()


def test_power_restore_leaves_an_ended_jobs_clock_lock_to_its_restore_and_says_how(node, monkeypatch, caplog):
    """`power restore` over a GPU the ended job's user capped over the prolog's clock
    lock: the record is what undoes the lock, so the GPU is left as it is, its record
    kept, and the warning names the restore that puts both back."""
    from hpcai.launcher.power import job_caps
    from hpcai.launcher.power.session import restore_originals

    helper_capped(node, 0, 300.0)
    record = prolog_locked(node, 0, user_cap=True)
    monkeypatch.setattr(job_caps, "slurm_job_live", lambda job: False)
    with caplog.at_level("WARNING"), make_backend("nvml") as backend:
        assert restore_originals(backend) == []
    assert node.limits() == [300.0, 700.0] and record.exists()
    assert "hpcai-power-helper restore --job 4242" in caplog.text
