"""`fleet run --nodelist` on the real two-node Slurm (tests/slurm_fixtures.py;
run under `flock /work/locks/slurm.lock`): a campaign over both nodes, one job
per node, at most one at once; `scancel` mid-way, then the same command
resumes it while node2 is drained (its job waits: `fleet status` says why), and
completes once node2 is back. Each node has its own two FAKE H100s (tests/
fakes: a "{node}" in HPCAI_FAKE_GPU_STATE; both Slurm nodes run on this one
machine). Real tiny ResNet-50 on the CPU per GPU."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FakeNode, one_line_error
from fakes import fake_gpu_state as fgs

pytestmark = pytest.mark.slow
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]
JOB_TIMEOUT_S = 1200


def node_gpus(node_no: int) -> list[dict]:
    devices = fgs.make_devices(2, "nvidia")
    for i, dev in enumerate(devices):
        dev["uuid"] = f"GPU-{node_no:08d}-0000-4000-8000-{i:012d}"
    return devices


@pytest.fixture
def fleet_env(slurm_cluster, tmp_path) -> dict:
    node = FakeNode(tmp_path, node_gpus(0))
    for no, name in ((1, "node1"), (2, "node2")):
        fgs.write_state(tmp_path / f"gpus-{name}.json", node_gpus(no))
    env = {**node.env, "SLURM_CONF": slurm_cluster.env["SLURM_CONF"],
           "HPCAI_FAKE_GPU_STATE": str(tmp_path / "gpus-{node}.json")}
    yield env
    node.stop_everything()


def hpcai(env, *args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHER, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def units(campaign: Path) -> dict:
    return {(p.parent.parent.name, int(p.parent.name[3:])): json.loads(p.read_text())
            for p in campaign.glob("nodes/*/gpu*/unit.json")}


def jobs(campaign: Path) -> dict:
    return json.loads((campaign / "campaign.json").read_text())["slurm"]["jobs"]


def limits(tmp_path: Path, name: str) -> list[float]:
    return [d["current_limit_w"] for d in fgs.read_state(tmp_path / f"gpus-{name}.json")["devices"]]


def test_a_campaign_over_both_nodes_resumed_after_scancel(slurm_cluster, fleet_env, tmp_path):
    campaign = tmp_path / "campaign"
    args = ("fleet", "run", "resnet50", "--preset", "tiny", "--cap", "300,400",
            "--nodelist", "node1,node2", "--max-concurrent", "1", "--device", "cpu",
            "--nproc", "1", "--selftest-s", "1", "-o", str(campaign))
    done = hpcai(fleet_env, *args)
    assert done.returncode == 0, done.stderr
    assert "2 node job(s) submitted, at most 1 at once" in done.stdout
    first = jobs(campaign)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:  # one node's GPUs under way: stop the campaign
        running = [k for k, u in units(campaign).items() if u["state"] == "running"]
        if len(running) == 2:
            break
        time.sleep(0.5)
    assert len(running) == 2, units(campaign)
    started = running[0][0]
    # The singleton throttle: the other node's job waits while this one runs.
    other = "node2" if started == "node1" else "node1"
    assert slurm_cluster.state(first[other]) == "PENDING"
    time.sleep(2)
    slurm_cluster.run("scancel", *first.values())
    for job in first.values():
        slurm_cluster.wait(job, 300)
    after = units(campaign)
    assert {after[(started, i)]["state"] for i in (0, 1)} == {"interrupted"}
    assert not any(node == other for node, _ in after)
    assert limits(tmp_path, started) == [700.0, 700.0]  # each cap session restored its GPU

    slurm_cluster.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=fleet-test")
    try:
        again = hpcai(fleet_env, *args)
        assert again.returncode == 0, again.stderr
        assert "resumed" in again.stdout and "2 node job(s) submitted" in again.stdout
        second = jobs(campaign)
        assert slurm_cluster.wait(second["node1"], JOB_TIMEOUT_S) == "COMPLETED"
        # node2 never starts while it is drained: status names it, with Slurm's reason.
        status = hpcai(fleet_env, "fleet", "status", str(campaign))
        assert "node2: not started; its job: PENDING" in status.stdout, status.stdout
    finally:
        slurm_cluster.run("scontrol", "update", "NodeName=node2", "State=RESUME")
    assert slurm_cluster.wait(second["node2"], JOB_TIMEOUT_S) == "COMPLETED"
    final = units(campaign)
    assert sorted(final) == [("node1", 0), ("node1", 1), ("node2", 0), ("node2", 1)]
    assert {u["state"] for u in final.values()} == {"done"}
    assert final[(started, 0)]["attempts"] == 2 and final[(other, 0)]["attempts"] == 1
    assert limits(tmp_path, "node1") == limits(tmp_path, "node2") == [700.0, 700.0]

    report = hpcai(fleet_env, "fleet", "report", str(campaign), "--json")
    doc = json.loads(report.stdout)
    assert {(g["node"], g["uuid"]) for g in doc["gpus"]} == {
        ("node1", "GPU-00000001-0000-4000-8000-000000000000"),
        ("node1", "GPU-00000001-0000-4000-8000-000000000001"),
        ("node2", "GPU-00000002-0000-4000-8000-000000000000"),
        ("node2", "GPU-00000002-0000-4000-8000-000000000001")}
    assert all(set(g["caps"]) == {"300", "400"} for g in doc["gpus"])
    # Nothing left to measure: a third submission submits nothing.
    third = hpcai(fleet_env, *args)
    assert "0 node job(s) submitted" in third.stdout and "2 node(s) already measured" in third.stdout


def test_slurm_bad_input_is_one_line(slurm_cluster, fleet_env, tmp_path):
    base = ("fleet", "run", "resnet50", "--preset", "tiny", "--cap", "300")
    one_line_error(hpcai(fleet_env, *base, "--partition", "nope", "-o", str(tmp_path / "a")),
                   "Slurm has no partition 'nope'", "choose from: ci")
    made = slurm_cluster.run("scontrol", "create", "PartitionName=empty", "State=UP")
    assert made.returncode == 0, made.stderr
    try:
        one_line_error(hpcai(fleet_env, *base, "--partition", "empty", "-o",
                             str(tmp_path / "b")), "partition 'empty' has no nodes")
    finally:
        slurm_cluster.run("scontrol", "delete", "PartitionName=empty")
    one_line_error(hpcai(fleet_env, *base, "--nodes", "3", "-o", str(tmp_path / "c")),
                   "--nodes 3 asks for more nodes than the 2 there")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
