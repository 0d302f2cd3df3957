"""Issue 25, section 1, through `hpcai-launch`: a second capped launcher with
its own journal folder is refused in one line naming the holder, and an
uncapped run on GPUs another run holds capped is not a valid uncapped figure.
Real launchers, torchrun and PyTorch on the CPU; the GPU library is the FAKE
pynvml (tests/fakes)."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from processes import popen_options

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1"]


def hold_cap(node, tmp_path, cap: str = "300") -> subprocess.Popen:
    """Another run holding a cap on both GPUs, with a journal in a folder of its own."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "authority_child.py"),
                             str(tmp_path / "other-home" / "power-journal.json"), cap, "all", "0", "other-run"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen_options(node.env, node.mark))
    assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)


def test_a_second_capped_launcher_elsewhere_is_refused_naming_the_holder(fake_nvidia_node, tmp_path):
    node = fake_nvidia_node
    holder = hold_cap(node, tmp_path)
    try:
        env = dict(node.env, HOME=str(tmp_path / "home-b"), XDG_STATE_HOME=str(tmp_path / "xdg-b"))
        done = subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", *TINY, "--cap", "400",
                               "--journal", str(tmp_path / "b" / "j.json"), "-o", str(node.results)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT,
                              **popen_options(env, node.mark))
        lines = [line for line in done.stderr.splitlines() if line.startswith("hpcai-launch:")]
        assert done.returncode != 0 and len(lines) == 1, done.stderr
        assert f"pid {holder.pid}" in lines[0] and "run other-run" in lines[0]
        assert "Traceback" not in done.stderr
        assert node.limits() == [300.0, 300.0]  # the holder's cap, untouched
        assert not (tmp_path / "b" / "j.json").exists()
    finally:
        release(holder)
    assert node.limits() == [700.0, 700.0]


def test_uncapped_run_on_gpus_another_run_capped_fails_enforced_limit(fake_nvidia_node, tmp_path):
    node = fake_nvidia_node
    holder = hold_cap(node, tmp_path)
    try:
        done = node.launch(*TINY, "-o", str(node.results))
    finally:
        release(holder)
    doc = node.only_result()
    checks = [c for c in doc["validity"]["checks"] if c["name"] == "enforced_limit"]
    assert checks and all(c["verdict"] == "fail" for c in checks), checks
    assert all(f"pid {holder.pid}" in c["note"] and "run other-run" in c["note"] for c in checks)
    assert "enforced_limit" in doc["validity"]["failed"]
    rows = doc["launcher"]["gpu_limits"]
    assert rows and all(r["held_by"] and r["enforced_at_start_w"] == 300.0 for r in rows)
    assert done.returncode is not None
