"""Hung ranks (issue 25, section 2), with real processes: torchrun and PyTorch
on the CPU, two ranks, a cap on two FAKE H100s (tests/fakes/pynvml.py, the
fake NVML at the library's boundary).

One rank is SIGSTOP'ed after the run made progress. torchrun starts each rank
in a session of its own, so the launcher's process group does not reach it.
- With --stall-timeout-s, the watchdog ends the run `failed` (the reason in
  the result), every rank is gone, and the cap comes back only after that.
- On SIGTERM to the launcher, the same: no limit restored while a rank lives.
A thread watches throughout: whenever the limits read back at their default,
no rank of the run may be alive (limits read first, ranks after: a rank seen
then was alive at the reading too)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import pid_alive

pytestmark = pytest.mark.slow
STALL_S = 45  # generous: on a loaded machine a tiny step can take seconds


def ranks_of(node) -> list[int]:
    """The node's workload ranks (not torchrun): they carry its fake state's path and a run tag."""
    marker = f"HPCAI_FAKE_GPU_STATE={node.state}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in env and any(e.startswith(b"HPCAI_WORKLOAD_TAG=") for e in env) \
                and b"hpcai.workloads" in cmdline and b"torch.distributed.run" not in cmdline \
                and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


class RestoreWatcher(threading.Thread):
    """Records every moment the limits were back at their default while a rank lived."""

    def __init__(self, node, default: list[float]):
        super().__init__(daemon=True)
        self.node, self.default = node, default
        self.violations: list[str] = []
        self.seen_capped = False
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                limits = self.node.limits()
            except (OSError, ValueError):
                continue
            if limits != self.default:
                self.seen_capped = True
            elif self.seen_capped:
                alive = ranks_of(self.node)
                if alive:
                    self.violations.append(f"limits {limits} restored while ranks {alive} lived")
            time.sleep(0.02)


def start_and_stop_a_rank(node, *extra: str):
    proc = node.popen("resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "2",
                      "--cap", "300", "--epochs", "500", "--warmup-epochs", "0",
                      "--steps-per-epoch", "2", "--ci-target", "off",
                      "-o", str(node.results), *extra)
    lines = []
    for line in proc.stdout:  # until a measured epoch: the run has made progress
        lines.append(line)
        if "epoch 1/" in line:
            break
    else:
        pytest.fail("the run ended before its first epoch:\n" + "".join(lines))
    ranks = ranks_of(node)
    assert len(ranks) == 2, ranks
    os.kill(ranks[-1], signal.SIGSTOP)  # hung: in its own session, deaf to all but SIGKILL
    return proc, ranks, lines


def finish(proc, lines, timeout):
    try:
        rest, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
        pytest.fail("the launcher did not end in time:\n" + "".join(lines) + rest)
    return "".join(lines) + rest


def test_a_stopped_rank_ends_the_run_failed_and_the_cap_comes_back_after_it(fake_nvidia_node):
    node = fake_nvidia_node
    default = node.limits()
    watcher = RestoreWatcher(node, default)
    watcher.start()
    proc, ranks, lines = start_and_stop_a_rank(node, "--stall-timeout-s", str(STALL_S))
    stopped_at = time.monotonic()
    output = finish(proc, lines, timeout=STALL_S * 6)
    took = time.monotonic() - stopped_at
    watcher.stop.set()
    watcher.join()
    assert proc.returncode != 0, output
    assert "Traceback" not in output
    assert not [p for p in ranks if pid_alive(p)], "ranks outlived the launcher"
    assert ranks_of(node) == []
    assert node.limits() == default and node.journal_files() == []
    assert watcher.seen_capped and watcher.violations == []
    doc = node.only_result()
    assert doc["status"] == "failed", doc["status"]
    assert doc["error"]["type"] == "Stalled"
    assert f"stall timeout {STALL_S:g} s" in doc["error"]["message"]
    assert doc["spec"]["protocol"]["stall_timeout_s"] == STALL_S
    assert "stalled: no step progress" in output
    # It waited for the timeout, not less: the watchdog decided from the progress it saw.
    assert took >= STALL_S - 5, took


def test_sigterm_to_the_launcher_restores_only_after_every_rank_is_gone(fake_nvidia_node):
    node = fake_nvidia_node
    default = node.limits()
    watcher = RestoreWatcher(node, default)
    watcher.start()
    proc, ranks, lines = start_and_stop_a_rank(node)  # the preset's default stall timeout
    proc.send_signal(signal.SIGTERM)
    output = finish(proc, lines, timeout=300)
    watcher.stop.set()
    watcher.join()
    assert proc.returncode != 0
    assert "Traceback" not in output
    assert not [p for p in ranks if pid_alive(p)], "ranks outlived the launcher"
    assert node.limits() == default and node.journal_files() == []
    assert watcher.seen_capped and watcher.violations == []
    doc = node.only_result()
    assert doc["status"] in ("interrupted", "failed"), doc["status"]
    assert json.loads(json.dumps(doc))["spec"]["protocol"]["stall_timeout_s"] == 600.0
