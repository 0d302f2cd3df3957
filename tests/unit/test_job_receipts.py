"""Per-job energy receipts (launcher/receipts/) on FAKE GPUs (tests/fakes/pynvml.py):
the prolog's and epilog's halves, the spool's checks, the store's tables, the mix.
Slurm's part (scontrol, the prolog and epilog themselves) runs on the real
two-node Slurm in tests/integration/test_job_receipts_slurm.py."""
from __future__ import annotations

import json
import os
import time

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.errors import ConfigError, UsageError
from hpcai.launcher.receipts import record, slurm, spool
from hpcai.launcher.receipts import store as receipt_store


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    path = tmp_path / "gpus.json"
    fgs.install(monkeypatch, path, fgs.make_devices(4, "nvidia"))
    yield path
    for device in fgs.read_state(path)["devices"]:
        for leftover in ("lock", "holder.json", "original.json", "job.json"):
            (record.gpu_reads.LOCK_ROOT / f"gpu-{device['uuid']}.{leftover}").unlink(missing_ok=True)


@pytest.fixture
def site(tmp_path):
    folder = tmp_path / "spool"
    return {"receipts": {"spool": str(folder)}}


def job(job_id="4242", indices=frozenset({0, 1}), **changes) -> dict:
    """The facts slurm.job_here returns for a job (its parsing is tested below and on real Slurm)."""
    facts = {"job_id": job_id, "node": "node1", "user": "alice", "uid": 1001, "account": "ml-team",
             "partition": "gpu", "job_name": "llama-pretrain", "qos": "normal", "restarts": 0,
             "slurm_state": "COMPLETING", "exit_code": "0:0", "end_state": "completed",
             "gpu_indices": set(indices)}
    facts.update(changes)
    return facts


def advance_energy(state, joules: dict[int, float]) -> None:
    """The counters move on as if the GPUs drew power meanwhile (the fake folds energy in mJ)."""
    for index, added in joules.items():
        device = fgs.read_state(state)["devices"][index]
        fgs.update_device(state, index, energy_mj=device["energy_mj"] + added * 1000.0,
                          energy_t=device["energy_t"])


def test_a_receipt_gives_each_gpus_energy_from_its_counters(gpus, site):
    record.begin(job(), site)
    folder = spool.spool_path(site)
    assert [p.name for p in folder.iterdir()] == ["4242.0.node1.start.json"]
    advance_energy(gpus, {0: 5000.0, 1: 7000.0})
    line = record.finish(job(), site)
    assert "receipt for job 4242 (completed): 2 GPU(s)" in line
    receipt = json.loads((folder / "4242.0.node1.json").read_text())
    assert not (folder / "4242.0.node1.start.json").exists()
    devices = fgs.read_state(gpus)["devices"]
    assert [g["uuid"] for g in receipt["gpus"]] == [devices[0]["uuid"], devices[1]["uuid"]]
    for g in receipt["gpus"]:
        assert g["energy_method"] == "counter"
        assert g["energy_j"] == pytest.approx(g["energy_end_j"] - g["energy_start_j"])
    # The fake's counter also grows with wall time at its reported power: at least what was added.
    assert receipt["gpus"][0]["energy_j"] >= 5000.0 and receipt["gpus"][1]["energy_j"] >= 7000.0
    assert receipt["gpus"][1]["energy_j"] - receipt["gpus"][0]["energy_j"] == pytest.approx(2000.0, abs=50)
    assert receipt["gpus"][0]["cap_w"] == 700.0 and receipt["gpus"][0]["cap_set_by"] == "default"
    assert receipt["gpus"][0]["model"] == "H100"
    assert receipt["gpus"][0]["sm_clock_mhz"] == 1980.0
    assert receipt["user"] == "alice" and receipt["partition"] == "gpu" and receipt["gpu_count"] == 2
    assert receipt["lost_gpus"] == [] and receipt["problems"] == []
    assert oct(os.stat(folder / "4242.0.node1.json").st_mode & 0o777) == "0o644"
