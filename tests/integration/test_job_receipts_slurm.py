"""Issue 44 §1 on the real two-node Slurm (tests/slurm_fixtures.py): the Prolog and
Epilog lines of docs/how-to/job-receipts.md run `hpcai-job-receipt start|end` as
root for every job; a job's receipt gives its GPUs' energy as the FAKE pynvml's
counters moved (tests/fakes), a job cancelled mid-way gets one marked killed,
and `hpcai-launch results jobs` lists both.

The GPUs are the fake library's (HPCAI_FAKE_GPU_STATE and PYTHONPATH in the
prolog/epilog script put it in place of the real one); the job's GPUs come from
Slurm (an exclusive node without GPU GRES: all of them).

Run under `flock /tmp/hpcai-services.lock` (fixed ports).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FAKES, ROOT
from fakes import fake_gpu_state as fgs
from hpcai.launcher.power import helper

pytestmark = pytest.mark.slow
RECEIPT = Path(sys.executable).parent / "hpcai-job-receipt"  # the installed console script
DOC_PROLOG = 'hpcai-job-receipt start --job "$SLURM_JOB_ID"'
DOC_EPILOG = 'hpcai-job-receipt end --job "$SLURM_JOB_ID"'


def test_the_documented_lines_are_the_ones_tested():
    doc = (ROOT / "docs" / "how-to" / "job-receipts.md").read_text()
    assert DOC_PROLOG in doc and DOC_EPILOG in doc


@pytest.fixture
def receipts_cluster(slurm_cluster, tmp_path):
    """The cluster with the docs' Prolog and Epilog (the receipt's lines through a root-owned
    script), the helper settings naming its slurm.conf and a site file with the spool;
    put back as they were afterwards."""
    state = tmp_path / "gpus.json"
    fgs.write_state(state, fgs.make_devices(2, "nvidia", power_draw_w=0.0))  # counters move only when we say
    spool = tmp_path / "spool"
    site = tmp_path / "site.toml"
    site.write_text(f'[receipts]\nspool = "{spool}"\n')
    scripts = {}
    for half, line in (("prolog", DOC_PROLOG), ("epilog", DOC_EPILOG)):
        script = tmp_path / f"{half}.sh"
        script.write_text("#!/bin/sh\n"
                          f"export HPCAI_FAKE_GPU_STATE={state} PYTHONPATH={FAKES}\n"  # the FAKE GPU library
                          f"PATH={RECEIPT.parent}:$PATH\n"
                          f"env >{tmp_path}/{half}-env-$SLURM_JOB_ID.txt\n"
                          f"{line} --site {site} >>{tmp_path}/{half}.log 2>&1 || "
                          f"echo \"receipt failed: $?\" >>{tmp_path}/{half}.log\nexit 0\n")
        script.chmod(0o755)
        scripts[half] = script
    config, saved_config = helper.HELPER_CONFIG, (helper.HELPER_CONFIG.read_bytes()
                                                  if helper.HELPER_CONFIG.exists() else None)
    config.parent.mkdir(mode=0o755, exist_ok=True)
    config.write_text(f'slurm_conf = "{slurm_cluster.conf}"\n')
    os.chmod(config, 0o644)
    conf = slurm_cluster.conf.read_text()
    slurm_cluster.conf.write_text(conf + f"Prolog={scripts['prolog']}\nEpilog={scripts['epilog']}\n")
    assert slurm_cluster.run("scontrol", "reconfigure").returncode == 0
    try:
        yield slurm_cluster, state, spool, tmp_path
    finally:
        slurm_cluster.conf.write_text(conf)
        slurm_cluster.run("scontrol", "reconfigure")
        if saved_config is None:
            config.unlink(missing_ok=True)
        else:
            config.write_bytes(saved_config)


def wait_for(path_glob, folder: Path, timeout: float = 120.0) -> Path:
    deadline = time.monotonic() + timeout
    while not (found := sorted(folder.glob(path_glob)) if folder.is_dir() else []):
        assert time.monotonic() < deadline, f"no {path_glob} in {folder}"
        time.sleep(0.2)
    return found[0]


def add_energy(state: Path, joules: list[float]) -> None:
    for index, added in enumerate(joules):
        device = fgs.read_state(state)["devices"][index]
        fgs.update_device(state, index, energy_mj=device["energy_mj"] + added * 1000.0)


def logs(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in sorted(tmp_path.glob("*.log")) + sorted(tmp_path.glob("epilog-env-*")))


def test_jobs_get_receipts_with_the_fake_counters_energy_and_a_killed_job_is_marked(receipts_cluster):
    cluster, state, spool, tmp_path = receipts_cluster
    done_job = cluster.sbatch("--exclusive", "-N1", "--output=/dev/null", "--wrap", "sleep 4")
    wait_for(f"{done_job}.0.*.start.json", spool)
    add_energy(state, [1500.0, 2500.0])
    assert cluster.wait(done_job, 120) == "COMPLETED"
    receipt = json.loads(wait_for(f"{done_job}.0.node?.json", spool).read_text())
    assert receipt["state"] == "completed", logs(tmp_path)
    uuids = [d["uuid"] for d in fgs.read_state(state)["devices"]]
    assert [g["uuid"] for g in receipt["gpus"]] == uuids
    assert [g["energy_j"] for g in receipt["gpus"]] == [pytest.approx(1500.0), pytest.approx(2500.0)]
    assert all(g["energy_method"] == "counter" for g in receipt["gpus"])
    assert receipt["user"] == "root" and receipt["partition"] == cluster.partition

    killed_job = cluster.sbatch("--exclusive", "-N1", "--output=/dev/null", "--wrap",
                                f"touch {tmp_path}/running-$SLURM_JOB_ID; sleep 600")
    wait_for(f"{killed_job}.0.*.start.json", spool)
    wait_for(f"running-{killed_job}", tmp_path)  # mid-way: its script runs (not still in the prolog)
    add_energy(state, [100.0, 0.0])
    assert cluster.run("scancel", killed_job).returncode == 0
    killed = json.loads(wait_for(f"{killed_job}.0.node?.json", spool).read_text())
    assert killed["state"] == "killed", (killed["slurm_state"], killed["exit_code"], logs(tmp_path))
    assert [g["energy_j"] for g in killed["gpus"]] == [pytest.approx(100.0), pytest.approx(0.0)]
    assert not list(spool.glob("*.start.json"))

    listed = subprocess.run([str(RECEIPT.parent / "hpcai-launch"), "results", "jobs", "--spool", str(spool),
                             "--store", str(tmp_path / "store.duckdb")],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()
            if line.split()[:2] in ([done_job, "node1"], [done_job, "node2"], [killed_job, "node1"],
                                    [killed_job, "node2"])}
    assert " completed " in rows[done_job] and " killed " in rows[killed_job]
    assert "2 receipt(s)" in listed.stdout


def test_a_requeued_job_gets_a_receipt_marked_requeued_for_the_run_that_ended(receipts_cluster):
    cluster, state, spool, tmp_path = receipts_cluster
    job = cluster.sbatch("--exclusive", "-N1", "--requeue", "--output=/dev/null", "--wrap",
                         f"touch {tmp_path}/running-$SLURM_JOB_ID; sleep 600")
    try:
        wait_for(f"{job}.0.*.start.json", spool)
        wait_for(f"running-{job}", tmp_path)
        add_energy(state, [50.0, 60.0])
        assert cluster.run("scontrol", "requeue", job).returncode == 0
        ended = sorted(p for p in spool.glob(f"{job}.*.json") if not p.name.endswith(".start.json"))
        deadline = time.monotonic() + 120
        while not ended:
            assert time.monotonic() < deadline, (sorted(spool.iterdir()), logs(tmp_path))
            time.sleep(0.2)
            ended = sorted(p for p in spool.glob(f"{job}.*.json") if not p.name.endswith(".start.json"))
        receipt = json.loads(ended[0].read_text())
        assert ended[0].name.startswith(f"{job}.0."), ended  # the run that started, not the next one
        assert receipt["state"] == "requeued", (receipt["slurm_state"], receipt["exit_code"], logs(tmp_path))
        assert [g["energy_j"] for g in receipt["gpus"]] == [pytest.approx(50.0), pytest.approx(60.0)]
        assert receipt["problems"] == []
    finally:
        cluster.run("scancel", job)


def test_a_start_file_left_by_a_job_slurm_no_longer_knows_becomes_a_receipt_at_the_next_prolog(receipts_cluster):
    """A start file as the prolog of a job whose node then failed leaves it (its epilog never
    ran; Slurm has since forgotten the job): node1's next prolog files it as
    ended-without-epilog; node2's is node2's to file. Each receipt carries the node's tier."""
    from hpcai.launcher.receipts import spool as spool_files

    cluster, state, spool, tmp_path = receipts_cluster
    uuid = fgs.read_state(state)["devices"][0]["uuid"]
    with spool_files.open_spool(spool, create=True) as folder:
        for job_id, node in (("999991", "node1"), ("999992", "node2")):
            spool_files.write(folder, spool_files.receipt_name(job_id, 0, node, start=True), {
                "kind": "hpcai-job-receipt-start", "job_id": job_id, "restarts": 0, "node": node, "user": "alice",
                "partition": cluster.partition, "start": "2026-11-27T10:00:00.000000Z", "t": 1.0,
                "gpus": [{"uuid": uuid, "index": 0, "model": "H100", "energy_j": 1000.0, "power_w": 300.0}],
                "node_meter": {}, "tier": {"tier": "counter"}})
    job = cluster.sbatch("--exclusive", "-N1", "-w", "node1", "--output=/dev/null", "--wrap", "sleep 1")
    assert cluster.wait(job, 120) == "COMPLETED"
    receipt = json.loads(wait_for(f"{job}.0.node1.json", spool).read_text())
    assert receipt["tier"]["tier"] in ("counter", "node-meter", "analyzer"), receipt["tier"]
    left = json.loads(wait_for("999991.0.node1.json", spool).read_text())
    assert left["state"] == "ended-without-epilog", logs(tmp_path)
    assert [(g["energy_start_j"], g["energy_j"]) for g in left["gpus"]] == [(1000.0, None)]
    assert not (spool / "999991.0.node1.start.json").exists()
    assert (spool / "999992.0.node2.start.json").exists() and not (spool / "999992.0.node2.json").exists()
