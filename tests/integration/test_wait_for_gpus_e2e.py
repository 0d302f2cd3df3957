"""Issue 25: `hpcai-launch --wait-for-gpus SECONDS`, end to end. Real launchers
(torchrun, PyTorch on the CPU) on a node whose GPU library is the FAKE pynvml
(tests/fakes); the node's cap authority is the real one (/run/hpcai flocks).

Each launcher has its own state folder (HPCAI_STATE_DIR), so only the node-wide
lock, not a shared journal, keeps the second off the first one's GPUs."""
from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest

from conftest import LAUNCHER, ROOT, one_line_error
from processes import popen_options

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny", "--device", "cpu"]


class Launcher:
    """A launcher in the background with its own state and results folders."""

    def __init__(self, node, name: str, *args: str):
        self.state_dir, self.results = node.state_dir.parent / f"state-{name}", node.state_dir.parent / name
        env = dict(node.env, HPCAI_STATE_DIR=str(self.state_dir))
        self.proc = subprocess.Popen([*LAUNCHER, *TINY, *args, "-o", str(self.results)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=ROOT, **popen_options(env, node.mark))
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()

    def wait_for(self, text: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None or any(text in line for line in self.lines), self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.1)

    def text(self) -> str:
        return "".join(self.lines)

    def result(self) -> dict:
        paths = sorted(self.results.glob("*/result.json"))
        assert len(paths) == 1, (paths, self.text())
        return json.loads(paths[0].read_text())


def test_a_waiting_launcher_runs_after_the_holder_and_a_short_wait_gives_up(fake_nvidia_node):
    node = fake_nvidia_node
    first = Launcher(node, "first", "--cap", "350", "--epochs", "500")
    try:
        first.wait_for("epoch 2/")
        assert node.limits() == [350.0, 350.0]

        # A short wait runs out: one line naming the holder, nothing changed.
        env = dict(node.env, HPCAI_STATE_DIR=str(node.state_dir.parent / "state-short"))
        short = node.launch(*TINY, "--cap", "400", "--epochs", "2", "--wait-for-gpus", "2",
                            "-o", str(node.state_dir.parent / "short"), env=env)
        one_line_error(short, "is held by another run after waiting 2 s", f"pid {first.proc.pid}")
        assert node.limits() == [350.0, 350.0]
        assert not (node.state_dir.parent / "state-short").exists() or not any(
            (node.state_dir.parent / "state-short").iterdir())
        assert not list((node.state_dir.parent / "short").glob("*/result.json"))

        # A long wait queues behind the holder: it says so, and changes nothing meanwhile.
        second = Launcher(node, "second", "--cap", "400", "--epochs", "2", "--wait-for-gpus", "1200")
        second.wait_for("waiting up to 1200 s")
        assert f"pid {first.proc.pid}" in second.text()
        assert second.proc.poll() is None and node.limits() == [350.0, 350.0]
        assert not any(second.results.glob("*/result.json"))
    finally:
        first.proc.send_signal(signal.SIGTERM)  # the holder ends: restores, releases
        first.proc.wait(timeout=300)
    assert first.result()["status"] == "interrupted"

    assert second.proc.wait(timeout=1200) == 0, second.text()
    doc = second.result()
    assert doc["status"] == "complete", doc.get("error")
    assert [g["enforced_at_start_w"] for g in doc["launcher"]["gpu_limits"]] == [400.0, 400.0]
    assert node.limits() == [700.0, 700.0]  # restored to the true original, not the first's cap
