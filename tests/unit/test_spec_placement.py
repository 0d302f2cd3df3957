"""The launcher holds a typed RunSpec from build_spec to spec.json (issue 24 §2):
planning, a sweep slot, an in-run process and its segments each place a new spec,
the one placed from stays as it was, and the JSON is the dict the launcher wrote
when it edited the spec in place."""
from __future__ import annotations

import dataclasses
import json

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.launcher.sweep import inrun
from hpcai.launcher.run import plan as planning
from hpcai.launcher.run import spec as launcher_spec
from hpcai.launcher.run.options import Options
from hpcai.launcher.run.runtime import HOST
from hpcai.launcher.slurm import inrun_node
from hpcai.launcher.sweep.slots import Slot
from hpcai.measure.adaptive import resolve_protocol
from hpcai.workloads.declaration import CPU_TINY_WINDOWS
from hpcai.spec import RunSpec
from hpcai.workloads.catalog import get_workload


@pytest.fixture
def planned(tmp_path, monkeypatch):
    """A tiny CPU run planned on a node with two FAKE H100s (their ids still go in
    the spec), with an SM clock cap; run ids fixed so the JSON can be written out."""
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    monkeypatch.setenv("HPCAI_STATE_DIR", str(tmp_path / "state"))
    ids = iter(f"run-{n}" for n in range(100))
    monkeypatch.setattr(launcher_spec, "make_run_id", lambda *args: next(ids))
    opts = Options(workload="resnet50", preset="tiny", device="cpu", runtime="host",
                   nproc=1, output=str(tmp_path / "results"), sm_clock_mhz=1410,
                   protocol={"epochs": 2})
    return planning.make_plan(opts), tmp_path / "results"


def _expected_plan_json(results) -> dict:
    """The planned spec as the launcher's in-place edits made it (plan.py before §2)."""
    built = launcher_spec.build_spec(
        get_workload("resnet50"), "tiny", impl="pytorch", overrides={},
        protocol_overrides={"epochs": 2, "telemetry": True}, device_type="cpu", vendor="nvidia",
        nproc=1, gpu_indices=[0, 1], cap_w=None, power_method="auto", cap_tolerance_frac=0.05,
        node_overhead_w=100.0, site={"name": "default", "path": None},
        output_dir=str(results), runtime=dict(HOST)).to_json()
    spec = json.loads(json.dumps(built))
    spec["protocol"] = resolve_protocol(spec["protocol"], CPU_TINY_WINDOWS)
    spec["node_power"] = {"sources": []}
    spec["power"]["clocks"] = {"sm_mhz": 1410, "mem_mhz": None}
    spec["run_id"] += "-sm1410MHz"
    spec["facility"] = {}
    devices = fgs.read_state(results.parent / "gpus.json")["devices"]  # the fake node's own UUIDs
    spec["devices"]["gpu_uuids"] = [d["uuid"] for d in devices]
    spec["devices"]["visible_ids"] = [d["uuid"] for d in devices]
    spec["output_dir"] = str(results / spec["run_id"])
    return spec


def test_a_planned_spec_is_typed_and_its_json_is_the_one_written_before(planned):
    plan, results = planned
    assert isinstance(plan.spec, RunSpec)
    expected = _expected_plan_json(results)
    expected["run_id"] = "run-0-sm1410MHz"  # the plan's build took run-0, this one run-1
    expected["output_dir"] = str(results / "run-0-sm1410MHz")
    doc = plan.spec.to_json()
    assert doc["site"]["name"] == "default"
    expected["site"] = doc["site"]  # the site file's path is this machine's
    assert doc == expected
    assert RunSpec.from_json(doc).to_json() == doc
    assert plan.command[-1] == str(results / "run-0-sm1410MHz" / "spec.json")


def test_a_sweep_slot_is_a_new_spec(planned):
    plan, results = planned
    before = plan.spec.to_json()
    block = {"id": "sweep-x", "key": "k", "position": 3, "repeat": 1, "repeats": 2,
             "order": "shuffle", "seed": 7, "point": [["batch_size", 4]]}
    slot = plan.spec.in_sweep(block)
    assert slot.to_json() == {**before, "sweep": block}
    assert plan.spec.to_json() == before and "sweep" not in before
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.spec.sweep = slot.sweep


def test_an_in_run_process_and_its_segments_are_new_specs(planned, tmp_path):
    plan, results = planned
    before = plan.spec.to_json()
    process = inrun.process_plan(plan, 3)
    assert plan.spec.to_json() == before and "inrun" not in before
    doc = process.spec.to_json()
    assert doc["inrun"] == {"channel": "control", "segments": 3}
    assert doc["protocol"] == resolve_protocol(before["protocol"], CPU_TINY_WINDOWS, in_run=True)
    assert {k: v for k, v in doc.items() if k not in ("inrun", "protocol")} == \
        {k: v for k, v in before.items() if k != "protocol"}

    block = {"id": "sweep-x", "key": "k", "repeats": 1, "order": "shuffle", "seed": 7,
             "in_run": True, "process_run_id": process.spec.run_id}
    place = inrun.sweep_place(tmp_path / "sweep-x", block)
    segment = place(process.spec.as_segment().with_cap(250.0), 2, Slot(250.0, 0))
    expected = {k: v for k, v in doc.items() if k != "inrun"}
    expected.update(run_id=segment.run_id, output_dir=str(tmp_path / "sweep-x" / segment.run_id),
                    power={**doc["power"], "cap_w": 250.0},
                    sweep={**block, "position": 2, "repeat": 0})
    assert segment.to_json() == expected
    assert segment.run_id != process.spec.run_id
    assert process.spec.to_json() == doc  # the process's spec is as it was


def test_a_slurm_node_placement_is_a_new_spec(planned):
    plan, results = planned
    before = plan.spec.to_json()
    slurm = {"job_id": "9", "step_id": "0", "run_index": 0, "mode": "allocation", "nodes": 2,
             "node_rank": 1, "rdzv_endpoint": None, "rdzv_id": None, "kill_wait_s": 30}
    node = plan.spec.on_node(slurm)
    assert node.to_json() == {**before, "slurm": slurm}
    assert "slurm" not in plan.spec.to_json()

    class Job:  # the two calls segment_place makes of a Slurm job
        folder = results / "job"

        @staticmethod
        def run(position):
            return type("Run", (), {"run_id": f"job-run-{position}"})

    place = inrun_node.segment_place(Job, 1, {"id": "job", "key": "k", "in_run": True})
    segment = place(node, 1, Slot(None, 0)).to_json()
    assert segment["slurm"] == {**slurm, "run_index": 1}
    assert segment["output_dir"] == str(results / "job" / "job-run-1" / "node-1")
    assert node.to_json() == {**before, "slurm": slurm}
