"""A `--preset paper` run that overrides one of the paper's settings still
runs, and its result (schema-checked) says it is not comparable, and why."""
import pytest

from conftest import assert_valid_result

pytestmark = pytest.mark.slow


def test_paper_with_batch_size_8_runs_but_is_not_comparable(cpu_node, result_schema):
    done = cpu_node.launch("resnet50", "--preset", "paper", "--batch-size", "8", "--nproc", "1",
                           "--warmup-epochs", "0", "--epochs", "1", "--steps-per-epoch", "1",
                           "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    doc = cpu_node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["config"]["batch_size_per_process"] == 8
    c = doc["comparability"]
    assert c["preset_kind"] == "paper" and c["comparable_to_paper"] is False
    assert any(r.startswith("--batch-size 8 overrides the paper preset's 'auto'")
               for r in c["reasons"]), c["reasons"]
    assert any(r.startswith("--epochs 1 overrides") for r in c["reasons"])
    assert "the run is on the CPU; the paper measured GPUs" in c["reasons"]
    # The paper's other settings held: fp32 weights (32-true on a CPU), NCHW, Adam.
    cfg = doc["config"]
    assert cfg["precision"] == "fp32" and cfg["channels_last"] is False
    assert cfg["optimizer"] == "Adam()" and cfg["learning_rate"] == 1e-4
    # Throughput per GPU and for the node, whatever the preset.
    assert doc["throughput"]["devices_node"] == 1
    assert doc["throughput"]["per_gpu"] == pytest.approx(doc["throughput"]["node"])


def test_a_result_without_its_reasons_is_refused_by_the_schema(cpu_node, result_schema):
    import copy

    import jsonschema

    done = cpu_node.launch("resnet50", "--preset", "tiny", "--nproc", "1",
                           "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    doc = cpu_node.only_result()
    assert doc["comparability"]["comparable_to_paper"] is False
    bad = copy.deepcopy(doc)
    bad["comparability"]["reasons"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, result_schema)
