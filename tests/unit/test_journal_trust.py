"""Issue 25, section 3 (first bullet): journals and state folders are trusted
only when this user alone could have written them, and `power restore` acts
only on journals whose GPUs and processes still match. A deleted journal
still gets the limits back, from the node's cap authority. GPU library: the
FAKE pynvml (tests/fakes); processes, files, owners and flocks are real."""
from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hpcai.errors import PowerError
from hpcai.launcher.power import authority
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.journal import load_journal, record_workload, write_journal
from hpcai.launcher.power.session import CapSession, restore_from_journal

from conftest import FAKES, LAUNCHER, ROOT
from fakes import fake_gpu_state as fgs
from processes import kill_marked, new_mark, popen_options


class Node:
    def __init__(self, tmp: Path, monkeypatch):
        self.tmp, self.state = tmp, tmp / "gpus.json"
        fgs.install(monkeypatch, self.state, fgs.make_devices(2, "nvidia"))
        self.uuids = [d["uuid"] for d in fgs.read_state(self.state)["devices"]]
        self.mark = new_mark()
        self.env = dict(os.environ, PYTHONPATH=str(FAKES), HPCAI_FAKE_GPU_STATE=str(self.state))

    def limits(self) -> list[float]:
        return [d["current_limit_w"] for d in fgs.read_state(self.state)["devices"]]

    def launch(self, *args, state_dir: Path) -> subprocess.CompletedProcess:
        return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True, timeout=600, cwd=ROOT,
                              **popen_options(dict(self.env, HPCAI_STATE_DIR=str(state_dir)), self.mark))


@pytest.fixture
def node(tmp_path, monkeypatch):
    made = Node(tmp_path, monkeypatch)
    yield made
    kill_marked(made.mark)
    for uuid in made.uuids:
        for suffix in ("lock", "holder.json", "original.json"):
            (authority.LOCK_ROOT / f"gpu-{uuid}.{suffix}").unlink(missing_ok=True)


def nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def planted(node: Node, folder: Path, victim_pgid: int) -> Path:
    """What another user could plant: a journal naming this node's GPUs, a low
    limit and an unrelated process group as its 'workload'."""
    journal = folder / f"power-journal-{os.uname().nodename}.json"
    journal.write_text(json.dumps({
        "format": 1, "hostname": os.uname().nodename, "pid": 999_999_999, "method": "nvml",
        "gpus": [{"index": i, "uuid": u, "limit_w": 200.0} for i, u in enumerate(node.uuids)],
        "workload": {"pgid": victim_pgid, "tag": "planted"}}))
    return journal


def sleeper(node: Node) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            **popen_options(node.env, node.mark))


def test_planted_journal_in_a_world_writable_folder_is_refused(node, tmp_path):
    """Fault: in a state folder another user can write, a planted journal made
    root kill an unrelated process group and set any limit."""
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o1777)
    victim = sleeper(node)
    journal = planted(node, folder, os.getpgid(victim.pid))
    done = node.launch("power", "restore", "--force", state_dir=folder)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert "refusing the state folder" in lines[0] and "world-writable" in lines[0]
    assert victim.poll() is None  # not killed
    assert node.limits() == [700.0, 700.0]  # nothing set
    assert journal.exists()
    victim.kill()
    victim.wait()


def test_journal_owned_by_another_user_is_refused(node, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    journal = planted(node, folder, 999_999_998)
    os.chown(journal, *nobody())
    with make_backend("nvml") as backend:
        with pytest.raises(PowerError, match="owned by nobody"):
            restore_from_journal(backend, journal, force=True)
        # A run refuses it too, before anything changes.
        with pytest.raises(PowerError, match="owned by nobody"):
            CapSession(backend, 300, None, journal).__enter__()
    assert node.limits() == [700.0, 700.0]


def test_journal_as_a_symlink_is_refused(node, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    target = planted(node, tmp_path, 999_999_998)
    (folder / "power-journal-x.json").symlink_to(target)
    with make_backend("nvml") as backend:
        with pytest.raises(PowerError, match="symbolic link"):
            restore_from_journal(backend, folder / "power-journal-x.json", force=True)
    assert node.limits() == [700.0, 700.0]


def test_a_trusted_journal_naming_an_unrelated_process_group_stops_nothing(node, tmp_path):
    """Our own folder and file, but its 'workload' is a process group that does
    not carry the run's tag: --force must not stop it."""
    victim = sleeper(node)
    journal = tmp_path / "state" / "power-journal-x.json"
    write_journal(journal, "nvml", {i: {"uuid": u, "limit_w": 700.0} for i, u in enumerate(node.uuids)})
    record_workload(journal, os.getpgid(victim.pid), "a-tag-nobody-carries")
    with make_backend("nvml") as backend:
        restore_from_journal(backend, journal, force=True)
    assert victim.poll() is None
    victim.kill()
    victim.wait()


def test_a_journal_with_a_limit_outside_the_gpus_range_sets_nothing(node, tmp_path):
    journal = tmp_path / "state" / "power-journal-x.json"
    write_journal(journal, "nvml", {0: {"uuid": node.uuids[0], "limit_w": 700.0},
                                    1: {"uuid": node.uuids[1], "limit_w": 5000.0}})
    with make_backend("nvml") as backend:
        with pytest.raises(PowerError, match="outside its range"):
            restore_from_journal(backend, journal)
    assert node.limits() == [700.0, 700.0] and journal.exists()


def test_a_journal_naming_gpus_this_node_lacks_sets_nothing(node, tmp_path):
    journal = tmp_path / "state" / "power-journal-x.json"
    write_journal(journal, "nvml", {0: {"uuid": node.uuids[0], "limit_w": 250.0},
                                    1: {"uuid": "GPU-elsewhere", "limit_w": 250.0}})
    with make_backend("nvml") as backend:
        with pytest.raises(PowerError, match="does not have"):
            restore_from_journal(backend, journal)
    assert node.limits() == [700.0, 700.0]


def test_restore_refuses_gpus_a_live_run_holds(node, tmp_path):
    """A journal (say, copied) over GPUs a running run holds: that run restores its own."""
    holder = subprocess.Popen([sys.executable, str(ROOT / "tests" / "authority_child.py"),
                               str(tmp_path / "a" / "j.json"), "300", "all"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              **popen_options(node.env, node.mark))
    try:
        assert holder.stdout.readline().strip() == "READY", holder.stderr.read()
        journal = tmp_path / "b" / "j.json"
        write_journal(journal, "nvml", {i: {"uuid": u, "limit_w": 700.0} for i, u in enumerate(node.uuids)})
        with make_backend("nvml") as backend:
            with pytest.raises(PowerError, match=f"held by another run .*pid {holder.pid}"):
                restore_from_journal(backend, journal, force=True)
        assert node.limits() == [300.0, 300.0]
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=120)
    assert node.limits() == [700.0, 700.0]


def test_deleted_journal_still_restores_from_the_node_record(node, tmp_path):
    """Fault: a deleted journal left caps applied after a crash. The node's
    cap authority kept the first holder's limits: `power restore` uses them."""
    state = tmp_path / "state"
    holder = subprocess.Popen([sys.executable, str(ROOT / "tests" / "authority_child.py"),
                               str(state / "power-journal-x.json"), "300", "all"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              **popen_options(node.env, node.mark))
    assert holder.stdout.readline().strip() == "READY", holder.stderr.read()
    holder.kill()
    holder.wait()
    for journal in state.glob("*.json"):
        journal.unlink()
    assert node.limits() == [300.0, 300.0]
    done = node.launch("power", "restore", state_dir=state)
    assert done.returncode == 0, done.stderr
    assert "from the node's record" in done.stdout
    assert node.limits() == [700.0, 700.0]
    assert authority.original_of(node.uuids[0]) is None


def test_state_folder_written_by_us_passes(node, tmp_path):
    journal = tmp_path / "state" / "power-journal-x.json"
    write_journal(journal, "nvml", {0: {"uuid": node.uuids[0], "limit_w": 700.0}})
    assert oct(journal.parent.stat().st_mode & 0o777) == "0o700"
    assert load_journal(journal)["gpus"][0]["uuid"] == node.uuids[0]


def test_site_check_reports_a_world_writable_state_folder(node, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o777)
    done = node.launch("site", "check", state_dir=folder)
    line = [x for x in done.stdout.splitlines() if "paths.state_dir ownership" in x]
    assert line and line[0].startswith("FAIL") and "world-writable" in line[0], done.stdout
    os.chmod(folder, 0o700)
    done = node.launch("site", "check", state_dir=folder)
    line = [x for x in done.stdout.splitlines() if "paths.state_dir ownership" in x]
    assert line and line[0].startswith("ok"), done.stdout
