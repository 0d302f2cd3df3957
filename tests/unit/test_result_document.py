"""The result document: its skeleton, cleaning and writing (hpcai/result_document.py),
the launcher's `running` placeholder made of it, and the entrypoint's assembly on
it (workloads/entrypoint.py Run._document and workloads/result.py), without
running a workload: epochs as a run would have recorded them, turned into a
schema-valid document with hand-checked numbers."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from hpcai import result_document
from hpcai.errors import Interrupted
from hpcai.launcher.run.results import validation_errors
from hpcai.launcher.run.runtime import HOST
from hpcai.launcher.run.spec import build_spec
from hpcai.workloads import distributed
from hpcai.workloads.catalog import get_workload
from hpcai.workloads.entrypoint import Run, framework_versions
from hpcai.workloads.protocol import Epoch


def _spec(tmp_path, **protocol):
    return build_spec(get_workload("resnet50"), "tiny", impl="pytorch", overrides={},
                      protocol_overrides=protocol, device_type="cpu", vendor=None, nproc=1,
                      gpu_indices=None, cap_w=None, power_method="auto", cap_tolerance_frac=0.05,
                      node_overhead_w=100.0, site={"name": "default"}, output_dir=str(tmp_path),
                      runtime=dict(HOST)).to_json()


def _run(tmp_path, durations, warmup=1, status="complete", epochs=None):
    spec = _spec(tmp_path, warmup_epochs=warmup, epochs=epochs or len(durations) - warmup)
    run = Run(spec, tmp_path)
    run.ctx = distributed.Context(0, 1, 0, 1, "cpu", None, None, 2, "node-a")
    t = 1000.0
    for i, seconds in enumerate(durations):
        run.progress.epochs.append(Epoch(i, i < warmup, 10, 80, t, t + seconds, seconds, 2.0 - i / 10))
        t += seconds
    run.progress.first_loss = 2.5
    run.status = status
    return run


def test_a_complete_cpu_run_becomes_a_valid_document_with_its_numbers(tmp_path):
    run = _run(tmp_path, [5.0, 2.0, 4.0])  # warm-up, then 80 images in 2 s and in 4 s
    doc = run._document()
    assert validation_errors(doc) == []
    tp = doc["throughput"]
    assert tp["unit"] == "images/s"
    assert tp["per_epoch_node"] == [40.0, 20.0]
    assert tp["node"] == pytest.approx(160 / 6.0)  # work over time, not the mean of epochs
    assert tp["per_gpu"] == pytest.approx(160 / 6.0)  # one process
    assert doc["work"]["measured_units"] == 160 and doc["work"]["measured_seconds"] == 6.0
    assert doc["protocol"]["epochs_completed"] == 3
    assert doc["protocol"]["measured_epochs_completed"] == 2
    assert doc["timestamps"]["measured_start"] == 1005.0 and doc["timestamps"]["measured_end"] == 1011.0
    assert doc["power"]["available"] is False
    assert doc["power"]["reason"] == "telemetry did not start (see the run's error)"
    assert doc["config"]["device_type"] == "cpu" and doc["config"]["processes"] == 1


def test_an_interrupted_run_with_only_its_warmup_is_still_a_valid_document(tmp_path):
    run = _run(tmp_path, [5.0], warmup=1, status="interrupted", epochs=10)
    run.error = {"type": "Interrupted", "message": "SIGTERM"}
    doc = run._document()
    assert validation_errors(doc) == []
    assert doc["status"] == "interrupted" and doc["throughput"]["node"] is None
    assert doc["power"]["reason"] == "telemetry did not start (see the run's error)"
    assert doc["timestamps"]["measured_start"] is None


def test_software_separates_the_torch_build_from_the_gpu_a_run_used():
    torch = pytest.importorskip("torch")
    cpu = distributed.Context(0, 1, 0, 1, "cpu", None, None, 2, "node-a")
    versions = framework_versions(cpu, "torch")
    assert versions["gpu_used"] is False
    assert versions["cuda"] is None and versions["rocm"] is None  # no GPU ran this
    assert versions["torch_build"]["cuda"] == torch.version.cuda  # what the wheel carries
    gpu = distributed.Context(0, 1, 0, 1, "cuda", None, None, 2, "node-a")
    with_gpu = framework_versions(gpu, "torch")
    assert with_gpu["gpu_used"] is True and with_gpu["cuda"] == torch.version.cuda


class _InductorError(RuntimeError):
    """Stands in for torch._inductor.exc.InductorError: torch.compile catches the
    exception a signal raised inside its compile workers' wait and raises its own."""


def _run_that_is_signalled_inside_a_library(tmp_path, monkeypatch, signalled: bool):
    import signal

    run = Run(_spec(tmp_path), tmp_path)
    written = {}

    def setup():
        if signalled:
            run._on_signal(signal.SIGTERM)  # what the handler does before raising
        try:
            raise Interrupted(signal.SIGTERM) if signalled else ValueError("bad shape")
        except Exception as inner:
            raise _InductorError(f"compiling: {inner}") from None  # the cause not kept

    monkeypatch.setattr(run, "_setup", setup)
    monkeypatch.setattr(run, "_finish", lambda: written.update(status=run.status, error=run.error))
    monkeypatch.setattr("hpcai.workloads.entrypoint.lifeline.watch", lambda log: None)
    return run.execute(), written


def test_a_signal_during_compile_is_an_interruption_not_a_failure(tmp_path, monkeypatch):
    code, written = _run_that_is_signalled_inside_a_library(tmp_path, monkeypatch, signalled=True)
    assert code == 130 and written["status"] == "interrupted"
    assert written["error"]["type"] == "Interrupted"
    assert "inside _InductorError" in written["error"]["message"]


def test_a_library_error_without_a_signal_is_still_a_failure(tmp_path, monkeypatch):
    code, written = _run_that_is_signalled_inside_a_library(tmp_path, monkeypatch, signalled=False)
    assert code == 1 and written["status"] == "failed"
    assert written["error"]["type"] == "_InductorError"


# ---- the skeleton and the launcher's placeholder -------------------------------------
def _placeholder(tmp_path):
    from hpcai.launcher.run.process import placeholder_result
    from hpcai.spec import RunSpec

    return placeholder_result(RunSpec.from_json(_spec(tmp_path)))


def test_the_placeholder_is_the_skeleton_with_no_figures_and_validates(tmp_path, result_schema):
    doc = _placeholder(tmp_path)
    assert validation_errors(doc) == []
    assert set(result_schema["required"]) <= set(doc)
    assert (doc["schema_version"], doc["kind"], doc["status"], doc["error"]) == \
        (result_document.SCHEMA_VERSION, "hpcai.result", "running", None)
    assert doc["spec"] == _spec(tmp_path) | {"run_id": doc["run_id"]}
    assert doc["epochs"] == [] and doc["gpus"] == [] and doc["throughput"]["node"] is None
    assert doc["throughput"]["unit"] == "images/s" and doc["work"]["unit"] == "images"
    assert doc["power"]["available"] is False and doc["power"]["energy_j"] is None
    assert doc["timestamps"]["started"] and doc["timestamps"]["finished"] is None


def test_a_placeholder_the_workload_never_replaced_is_finished_as_a_valid_failure(tmp_path):
    from hpcai.launcher.run import results

    doc = _placeholder(tmp_path)
    results.mark_crashed(doc, 1)
    results.apply_limits(doc, {}, None, 0.05)
    assert validation_errors(doc) == []
    assert doc["status"] == "failed" and doc["error"]["type"] == "WorkloadCrashed"


def test_the_entrypoint_fills_the_same_skeleton_in_its_order(tmp_path):
    run = _run(tmp_path, [5.0, 2.0, 4.0])
    doc = run._document()
    skeleton = result_document.skeleton(run.spec, run.started, "images")
    assert list(doc)[:len(skeleton)] == list(skeleton)
    assert doc["schema_version"] == skeleton["schema_version"] and doc["host"] == skeleton["host"]
    for key in ("timestamps", "protocol", "throughput", "work", "power", "sidecar"):
        assert set(skeleton[key]) <= set(doc[key]), key  # every empty key, now filled
    assert doc["protocol"]["epochs_completed"] == 3 and skeleton["protocol"]["epochs_completed"] == 0


def test_building_the_placeholder_does_not_import_the_workload_entrypoint(tmp_path):
    # The launcher owns no private part of the entrypoint: the skeleton is hpcai's.
    code = ("import json, sys\n"
            "from hpcai.launcher.run.process import placeholder_result\n"
            "from hpcai.spec import RunSpec\n"
            "doc = placeholder_result(RunSpec.from_json(json.loads(sys.argv[1])))\n"
            "print(doc['status'], sorted(m for m in sys.modules if m.startswith('hpcai.workloads.')"
            " and m.split('.')[2] in ('entrypoint', 'result')))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(_spec(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["running", "[]"]


# ---- cleaning and writing ------------------------------------------------------------
def test_cleaning_turns_every_non_finite_number_into_null_and_keeps_the_rest():
    doc = {"a": math.nan, "b": [1.5, math.inf, {"c": -math.inf, "d": "x"}], "e": 0, "f": None}
    assert result_document.clean(doc) == {"a": None, "b": [1.5, None, {"c": None, "d": "x"}],
                                          "e": 0, "f": None}


def test_the_result_is_written_cleaned_and_other_documents_refuse_nan(tmp_path):
    result_document.write(tmp_path / "result.json", {"status": "complete", "energy_j": math.nan})
    text = (tmp_path / "result.json").read_text()
    assert json.loads(text) == {"status": "complete", "energy_j": None} and text.endswith("}\n")
    with pytest.raises(ValueError):
        result_document.write_json_atomic(tmp_path / "job.json", {"x": math.nan})
    assert not (tmp_path / "job.json").exists()
    assert [p.name for p in Path(tmp_path).iterdir()] == ["result.json"]  # no temporary left
