"""The typed run spec (hpcai/spec.py): its fields are the result schema's
`$defs/spec`, it round-trips the launcher's spec exactly, it checks what the
entrypoint needs, and placing it returns a new spec."""
import dataclasses
import json
from pathlib import Path

import pytest

from hpcai.errors import UsageError
from hpcai.spec import (UNSET, Clocks, Devices, InRun, Power, Protocol, RunSpec, Slurm, Sweep,
                        is_optional)

SCHEMA = Path(__file__).resolve().parents[2] / "hpcai" / "schema" / "result-v1.schema.json"
SPEC_DEF = json.loads(SCHEMA.read_text())["$defs"]["spec"]


# Each part and where the schema defines it.
PARTS = [
    (RunSpec, SPEC_DEF),
    (Devices, SPEC_DEF["properties"]["devices"]),
    (Power, SPEC_DEF["properties"]["power"]),
    (Clocks, SPEC_DEF["properties"]["power"]["properties"]["clocks"]),
    (Protocol, SPEC_DEF["properties"]["protocol"]),
    (Sweep, SPEC_DEF["properties"]["sweep"]),
    (Slurm, SPEC_DEF["properties"]["slurm"]),
    (InRun, SPEC_DEF["properties"]["inrun"]),
]


@pytest.mark.parametrize("part, definition", PARTS, ids=[p.__name__ for p, _ in PARTS])
def test_the_schemas_spec_definition_and_the_dataclass_fields_are_the_same(part, definition):
    fields = {f.name: f for f in dataclasses.fields(part) if f.name != "extra"}
    assert set(definition["properties"]) == set(fields)
    for name in definition.get("required", []):
        field = fields[name]
        # A required key is a field without a default, whose type does not admit null
        # unless the schema's does (power.cap_w: null is "no cap").
        assert field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        schema_type = definition["properties"][name].get("type", [])
        assert is_optional(part, name) == ("null" in schema_type), name


def test_every_part_in_the_schema_is_typed_as_a_part():
    assert RunSpec.PARTS == {"protocol": Protocol, "devices": Devices, "power": Power,
                             "sweep": Sweep, "slurm": Slurm, "inrun": InRun}
    assert Power.PARTS == {"clocks": Clocks}


def _built(tmp_path) -> dict:
    from hpcai.launcher.run.runtime import HOST
    from hpcai.launcher.run.spec import build_spec
    from hpcai.workloads.catalog import get_workload

    return build_spec(get_workload("resnet50"), "tiny", impl="pytorch", overrides={"seed": None},
                      protocol_overrides={"epochs": 3}, device_type="cuda", vendor="nvidia",
                      nproc=2, gpu_indices=[0, 1], cap_w=300.0, power_method="nvml",
                      cap_tolerance_frac=0.05, node_overhead_w=100.0,
                      site={"name": "default", "path": None}, output_dir=str(tmp_path),
                      runtime=dict(HOST)).to_json()


def test_a_spec_built_by_the_launcher_round_trips_exactly(tmp_path, result_schema):
    built = _built(tmp_path)
    assert list(built) == ["spec_version", "run_id", "workload", "impl", "preset", "preset_kind",
                           "params", "overridden", "comparability", "protocol", "devices",
                           "power", "site", "runtime", "output_dir", "seed"]
    assert built["devices"] == {"type": "cuda", "vendor": "nvidia", "nproc": 2,
                                "gpu_indices": [0, 1]}
    assert built["power"] == {"cap_w": 300.0, "method": "nvml", "cap_tolerance_frac": 0.05,
                              "node_overhead_w": 100.0}
    assert built["protocol"]["epochs"] == 3 and isinstance(built["overridden"], list)
    spec = RunSpec.from_json(built)
    assert spec.to_json() == built
    assert json.dumps(spec.to_json()) == json.dumps(built)  # the same order too
    # What the launcher adds later (plan, sweep, Slurm, in-run) round-trips as well.
    placed = {**built, "node_power": {"sources": []}, "facility": {},
              "devices": {**built["devices"], "gpu_uuids": ["GPU-a", "GPU-b"], "visible_ids": [0, 1]},
              "power": {**built["power"], "clocks": {"sm_mhz": 1410, "mem_mhz": None}},
              "sweep": {"id": "s", "key": "k", "position": 1, "repeat": 0, "in_run": True,
                        "point": [["batch_size", 4]]},
              "slurm": {"job_id": "7", "nodes": 2, "node_rank": 1, "rdzv_endpoint": None},
              "inrun": {"channel": "control", "segments": 3}, "someday": [1]}
    again = RunSpec.from_json(placed)
    assert again.to_json() == placed
    assert again.sweep.point == (("batch_size", 4),) and again.extra["someday"] == (1,)
    # A result keeping it still validates against the schema.
    from jsonschema import Draft202012Validator

    # The spec's definition alone (it refers to the result's runtime definition).
    validator = Draft202012Validator({
        "$defs": result_schema["$defs"], "$ref": "#/$defs/spec",
        "properties": {"runtime": result_schema["properties"]["runtime"]}})
    assert not list(validator.iter_errors(placed))


def test_a_spec_is_immutable_and_placing_returns_a_new_one(tmp_path):
    built = _built(tmp_path)
    spec = RunSpec.from_json(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.run_id = "other"
    with pytest.raises(TypeError):
        spec.params["batch_size"] = 1
    placed = spec.placed(run_id="r2", output_dir="/out/r2")
    assert (placed.run_id, placed.output_dir) == ("r2", "/out/r2")
    assert (spec.run_id, spec.output_dir) == (built["run_id"], str(tmp_path))
    slot = placed.in_sweep({"id": "s", "key": "k", "position": 2, "repeat": 1}).with_cap(250.0)
    assert slot.sweep == Sweep(id="s", key="k", position=2, repeat=1)
    assert slot.power.cap_w == 250.0 and spec.power.cap_w == 300.0 and spec.sweep is UNSET
    node = slot.on_node({"job_id": "9", "nodes": 2, "node_rank": 1})
    assert node.to_json()["slurm"] == {"job_id": "9", "nodes": 2, "node_rank": 1}
    assert "slurm" not in slot.to_json()
    process = spec.as_process({**spec.protocol.to_json(), "ci_target": 0.02}, "control", 3)
    assert process.inrun == InRun(channel="control", segments=3)
    assert process.protocol.get("ci_target") == 0.02 and spec.protocol.get("ci_target") is None
    assert "inrun" not in process.as_segment().to_json()


@pytest.mark.parametrize("doc, message", [
    ([], "it is a JSON list, not an object"),
    ({}, "key 'run_id' is missing"),
    ({"run_id": "r", "workload": "resnet50"}, "key 'preset' is missing"),
    ({"run_id": "r", "workload": "w", "preset": "p", "params": [], "protocol": {},
      "devices": {}, "power": {}}, "key 'params' is not a dict"),
    ({"run_id": "r", "workload": "w", "preset": "p", "params": {}, "protocol": {},
      "devices": {}, "power": {}}, "key 'output_dir' is missing"),
    ({"run_id": "r", "workload": "w", "preset": "p", "params": {}, "output_dir": "/o",
      "protocol": {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1},
      "devices": {}, "power": {}}, "key protocol.sample_interval_s is missing"),
    ({"run_id": "r", "workload": "w", "preset": "p", "params": {}, "output_dir": "/o",
      "protocol": {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1,
                   "sample_interval_s": 0.1}, "devices": {"type": "cpu"},
      "power": {"cap_w": None, "method": "auto", "node_overhead_w": 0.0},
      "sweep": {"id": "s", "key": "k", "position": 0}}, "key sweep.repeat is missing"),
])
def test_what_a_spec_lacks_is_one_line(doc, message):
    with pytest.raises(UsageError) as caught:
        RunSpec.from_json(doc)
    assert caught.value.one_line().startswith(message)
    assert "hpcai-launch WORKLOAD --dry-run" in caught.value.one_line()


def test_an_older_spec_without_version_or_runtime_is_read_as_it_is():
    doc = {"run_id": "r", "workload": "w", "preset": "p", "params": {},
           "protocol": {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1,
                        "sample_interval_s": 0.1}, "devices": {"type": "cpu"},
           "power": {"cap_w": None, "method": "auto", "node_overhead_w": 0.0}}
    spec = RunSpec.from_json(doc, need_output=False)
    assert spec.runtime is UNSET and spec.to_json() == doc


def test_the_entrypoint_runs_a_typed_spec_as_its_json(tmp_path):
    from hpcai.workloads.entrypoint import Run

    built = _built(tmp_path)
    run = Run(RunSpec.from_json(built), tmp_path / "out")
    assert run.spec == built and not run.in_run and run.result_file == "result.json"
    process = RunSpec.from_json(built).as_process(built["protocol"], "control", 2)
    assert Run(process, tmp_path / "out").in_run
