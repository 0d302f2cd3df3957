"""A real tiny run (PyTorch ResNet-50 on the CPU) on a node of FAKE GPUs
(tests/fakes pynvml: reported power is min(draw, limit)): the GPU draws 290 W
under a 500 W cap, so the cap does not bind, and MLCommons' own tools
(mlperf-logging from PyPI) read its MLPerf log and power file: the parser,
the package checker's power checks, and the result summarizer's energy
within 1% of hpcai's."""
import pytest

from conftest import FakeNode, assert_valid_result
from fakes import fake_gpu_state as fgs

pytestmark = pytest.mark.slow


def test_a_tiny_run_below_its_cap_and_its_mlperf_logs(tmp_path, result_schema):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.package_checker.power_checker import PowerChecker
    from mlperf_logging.result_summarizer.result_summarizer import _compute_total_power

    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia", power_draw_w=290.0, throttle_reasons=0))
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1",
                       "--cap", "500", "-o", str(node.results), timeout=1200)
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    binding = doc["power"]["cap_binding"]
    assert binding["binds"] is False and binding["limit_w"] == pytest.approx(500.0)
    assert binding["power_drawn_w"]["max"] == pytest.approx(290.0)

    run_dir = node.results / doc["run_id"]
    log = run_dir / "mllog.txt"
    lines, errors = parse_file(str(log), ruleset="6.1.0")
    assert not errors
    stamps = {x.key: x.timestamp for x in lines if x.key in ("run_start", "run_stop")}
    assert stamps["run_start"] == round(doc["timestamps"]["measured_start"] * 1000)
    assert stamps["run_stop"] == round(doc["timestamps"]["measured_end"] * 1000)
    ok, bad = PowerChecker("6.1.0").check_power(str(run_dir / "power"), [str(log)])
    assert ok and not bad
    energy = _compute_total_power(str(run_dir), str(log), stamps["run_stop"] - stamps["run_start"],
                                  "6.1.0")
    assert energy == pytest.approx(doc["power"]["energy_j"], rel=0.01)
    # run_stop's status follows the launcher's final validity verdict.
    stop = next(x for x in lines if x.key == "run_stop").value["metadata"]
    assert stop["validity"] == doc["validity"]["verdict"]
    assert stop["status"] == ("aborted" if doc["validity"]["verdict"] == "fail" else "success")


def test_a_paper_preset_run_records_the_papers_accounting_beside_ours(tmp_path, result_schema):
    # Shrunk by flags (so not comparable), but still a `paper` preset: the block is written.
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia", power_draw_w=400.0))
    done = node.launch("resnet50", "--preset", "paper", "--device", "cpu", "--nproc", "1",
                       "--batch-size", "2", "--warmup-epochs", "1", "--epochs", "2",
                       "--steps-per-epoch", "1", "-o", str(node.results), timeout=1200)
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    paper = doc["power"]["paper_accounting"]
    assert paper["method"] == "vision-callback"
    assert "performance_tracking2_rocm.py" in paper["upstream"]
    # The fake draws a constant 400 W, so both accountings see 400 W per GPU; the
    # paper's mean holds the warm-up epoch's samples too (more samples than our window's).
    assert paper["mean_power_w_per_gpu"] == pytest.approx(400.0, rel=0.01)
    assert doc["power"]["mean_power_w"] == pytest.approx(400.0, rel=0.01)
    assert paper["power_samples"] > doc["gpus"][0]["samples"]
    rates = doc["throughput"]["per_epoch_node"]
    assert paper["throughput_node"] == pytest.approx(sum(rates) / len(rates))
