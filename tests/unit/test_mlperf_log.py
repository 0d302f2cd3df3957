"""mllog.txt: a result written as an MLPerf-format log through mlperf-logging's
mllog, read back with that package's own parser (mlp_parser)."""
from hpcai.gpu.base import GpuReading
from hpcai.workloads import mlperf_log
from report_docs import make_result


class RecordedSampler:
    """What hpcai/measure/telemetry.Sampler keeps: sample times and one reading per source."""

    def __init__(self, times, watts):
        self.times = list(times)
        self.readings = [[GpuReading(power_w=w), GpuReading(power_w=w + 10.0)] for w in watts]


def test_the_log_carries_the_results_numbers(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    doc = make_result(gpus=2, per_gpu=1000.0, cap_w=300.0, window_s=10.0)
    doc["epochs"] = [{"index": i, "warmup": i == 0, "steps": 50, "units": 20000, "start": 990.0 + 10 * i,
                      "end": 1000.0 + 10 * i, "duration_s": 10.0, "loss": 6.0} for i in range(2)]
    sampler = RecordedSampler([995.0, 1001.0, 1005.0, 1009.5, 1012.0], [100.0, 200.0, 210.0, 220.0, 50.0])
    samples = mlperf_log.power_samples(sampler, 1000.0, 1010.0)
    assert samples == [(1001.0, 410.0), (1005.0, 430.0), (1009.5, 450.0)]  # two sources summed, window only

    path = tmp_path / mlperf_log.MLLOG_FILE
    assert mlperf_log.write(path, doc, samples) is None
    lines, errors = parse_file(str(path), ruleset="6.1.0")
    assert not errors
    by_key = {}
    for line in lines:
        by_key.setdefault(line.key, []).append(line)
    assert [x.key for x in lines][:1] == ["submission_benchmark"]
    assert by_key["submission_benchmark"][0].value["value"] == "resnet50"
    assert by_key["throughput"][0].value["value"] == doc["throughput"]["node"] == 2000.0
    assert by_key["throughput"][0].value["metadata"]["per_gpu"] == 1000.0
    assert by_key["energy"][0].value["value"] == doc["power"]["energy_j"]
    assert [r.value["value"] for r in by_key["power_reading"]] == [410.0, 430.0, 450.0]
    assert all(r.value["metadata"]["host"] == doc["host"]["node"] for r in by_key["power_reading"])
    assert by_key["power_measurement_start"][0].timestamp == 1000.0 * 1000
    assert len(by_key["epoch_start"]) == len(by_key["epoch_stop"]) == 2
    assert by_key["epoch_stop"][1].value["metadata"]["samples_count"] == 20000
    assert by_key["run_start"][0].timestamp == 990_000 and by_key["run_stop"][0].timestamp == 1_010_000
    assert by_key["run_stop"][0].value["metadata"]["status"] == "success"


def test_a_failed_run_is_logged_as_aborted(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    doc = make_result(status="failed")
    doc["epochs"] = []
    path = tmp_path / "mllog.txt"
    assert mlperf_log.write(path, doc, []) is None
    lines, errors = parse_file(str(path), ruleset="6.1.0")
    stop = [x for x in lines if x.key == "run_stop"]
    assert not errors and stop[0].value["metadata"]["status"] == "aborted"
    assert not [x for x in lines if x.key.startswith("power")]
