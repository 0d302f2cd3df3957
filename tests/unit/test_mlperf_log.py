"""mllog.txt: a result written as an MLPerf-format log through mlperf-logging's
mllog, read back with that package's own parser (mlp_parser), power checker
(package_checker/power_checker.py) and energy calculation (result_summarizer)."""
import pytest

from hpcai.gpu.base import GpuReading
from hpcai.workloads import mlperf_log
from report_docs import make_result


class RecordedSampler:
    """What hpcai/measure/telemetry.Sampler keeps: sample times and one reading per source."""

    def __init__(self, times, watts):
        self.times = list(times)
        self.readings = [[GpuReading(power_w=w), GpuReading(power_w=w + 10.0)] for w in watts]


def by_key(lines):
    out = {}
    for line in lines:
        out.setdefault(line.key, []).append(line)
    return out


def logged_run(tmp_path, **changes):
    """A 2-GPU result: warm-up epoch 990-1000 s, measured 1000-1010 s, written as a log."""
    doc = make_result(gpus=2, per_gpu=1000.0, cap_w=300.0, window_s=10.0)
    doc["epochs"] = [{"index": i, "warmup": i == 0, "steps": 50, "units": 20000, "start": 990.0 + 10 * i,
                      "end": 1000.0 + 10 * i, "duration_s": 10.0, "loss": 6.0} for i in range(2)]
    doc.update(changes)
    sampler = RecordedSampler([995.0, 999.5, 1001.0, 1005.0, 1009.5, 1010.5, 1012.0],
                              [100.0, 190.0, 200.0, 210.0, 220.0, 230.0, 50.0])
    samples = mlperf_log.power_samples(sampler, 0.0, 2000.0)
    path = tmp_path / "run" / mlperf_log.MLLOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = {0: 40000, 1: 40000}  # both ranks' units: the node's count
    assert mlperf_log.write(path, doc, samples, mlperf_log.GPU_ONLY, counts) is None
    return doc, path


def test_the_log_carries_the_results_numbers_and_times_the_measured_window(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    doc, path = logged_run(tmp_path)
    lines, errors = parse_file(str(path), ruleset="6.1.0")
    assert not errors
    keys = by_key(lines)
    assert [x.key for x in lines][:1] == ["submission_benchmark"]
    assert keys["submission_benchmark"][0].value["value"] == "resnet50"
    assert keys["throughput"][0].value["value"] == doc["throughput"]["node"] == 2000.0
    assert keys["throughput"][0].value["metadata"]["per_gpu"] == 1000.0
    assert keys["energy"][0].value["value"] == doc["power"]["energy_j"]
    # The timed span is the measured window; the warm-up sits in init, before run_start.
    assert keys["init_start"][0].timestamp == 990_000 and keys["init_stop"][0].timestamp == 1_000_000
    assert keys["run_start"][0].timestamp == 1_000_000 and keys["run_stop"][0].timestamp == 1_010_000
    assert len(keys["epoch_start"]) == len(keys["epoch_stop"]) == 2
    assert keys["epoch_stop"][1].value["metadata"]["samples_count"] == 40000  # the node's
    assert keys["run_stop"][0].value["metadata"]["status"] == "success"
    # Power is not in the run log but in MLPerf Power's file beside it, labelled GPU-only.
    assert "power_reading" not in keys
    assert keys["power_boundary"][0].value["value"].startswith("GPU boards only")
    power, errors = parse_file(str(tmp_path / "run" / "power" / "mllog" / "node_0.txt"), ruleset="6.1.0")
    power = by_key(power)
    # The samples bracketing the window: 999.5 (last before) to 1010.5 (first after).
    assert [r.value["value"] for r in power["power_reading"]] == [390.0, 410.0, 430.0, 450.0, 470.0]
    assert power["power_measurement_start"][0].timestamp == 999_500
    assert power["power_measurement_stop"][0].timestamp == 1_010_500
    assert all(r.value["metadata"]["host"] == doc["host"]["node"] for r in power["power_reading"])


def test_mlcommons_power_checks_and_energy_agree_with_the_readings(tmp_path):
    from mlperf_logging.package_checker.power_checker import PowerChecker
    from mlperf_logging.result_summarizer.result_summarizer import _compute_total_power

    doc, path = logged_run(tmp_path)
    ok, bad = PowerChecker("6.1.0").check_power(str(path.parent / "power"), [str(path)])
    assert ok and not bad
    energy = _compute_total_power(str(path.parent), str(path), 10_000, "6.1.0")
    # MLCommons: sum of reading x time since the previous one, over the readings' span,
    # stretched to the 10 s time to train: (410*1.5 + 430*4 + 450*4.5 + 470*1) / 11 * 10.
    expected = (410 * 1.5 + 430 * 4.0 + 450 * 4.5 + 470 * 1.0) / 11.0 * 10.0
    assert energy == pytest.approx(expected)


def test_a_run_that_failed_validity_is_not_a_success(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    _, path = logged_run(tmp_path, validity={"verdict": "fail", "checks": [], "failed": ["cap"]})
    lines, _ = parse_file(str(path), ruleset="6.1.0")
    stop = by_key(lines)["run_stop"][0].value["metadata"]
    assert stop["status"] == "aborted" and stop["validity"] == "fail"


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


def test_the_launchers_later_verdict_restamps_run_stop(tmp_path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    doc, path = logged_run(tmp_path)
    doc["validity"] = {"verdict": "fail", "checks": [], "failed": ["cap_enforced"]}
    assert mlperf_log.restamp_status(path, doc) is True
    lines, errors = parse_file(str(path), ruleset="6.1.0")
    assert not errors
    stop = by_key(lines)["run_stop"][0].value["metadata"]
    assert stop["status"] == "aborted" and stop["validity"] == "fail"
    # A symlink planted in place of the log is not followed.
    target = tmp_path / "elsewhere.txt"
    target.write_text(path.read_text())
    link = tmp_path / "run" / "linked.txt"
    link.symlink_to(target)
    before = target.read_text()
    assert mlperf_log.restamp_status(link, doc) is False and target.read_text() == before


def test_node_power_is_used_where_a_node_source_measured_it():
    from hpcai.measure import node_power as NP
    from hpcai.measure.source import Channel, PowerSource, Sample

    class BmcNode(PowerSource):  # a node-scope source (as IPMI's DCMI reading) and a CPU one
        kind, api, max_power_w = "ipmi", "ipmitool dcmi power reading", 1e4
        channels = [Channel("cpu", "cpu_package"), Channel("node", "node")]

        def read(self):
            raise AssertionError("not sampled here")

    sampler = NP.NodePowerSampler(None)
    run = NP.SourceRun(BmcNode(), interval_s=1.0)
    run.samples = [Sample(10.0 + t, {"cpu": 100.0, "node": 900.0 + t}, {}) for t in range(3)]
    sampler.runs = [run]
    points, api = mlperf_log.node_samples(sampler)
    assert api == "ipmitool dcmi power reading"
    assert [w for _, w in points] == [900.0, 901.0, 902.0]  # the node channel, not the CPU's
    assert points[1][0] - points[0][0] == pytest.approx(1.0)
    assert mlperf_log.NODE.format(api=api).startswith("node (a node-scope source")
    sampler.runs = []
    assert mlperf_log.node_samples(sampler) is None  # no node source: the GPUs' sum, GPU-only


def test_a_link_planted_at_the_log_or_its_power_folder_is_never_written_through(tmp_path):
    """mlperf-logging's handlers open paths following links (root overwrote a 0600 file
    through a planted mllog.txt): the log and its power file are made no-follow."""
    victim = tmp_path / "victim.txt"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / mlperf_log.MLLOG_FILE).symlink_to(victim)
    (run / mlperf_log.POWER_DIR).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OSError):  # the planted power folder is refused (ELOOP), not followed
        logged_run(tmp_path)
    assert victim.read_text() == "secret\n" and list(elsewhere.iterdir()) == []
    (run / mlperf_log.POWER_DIR).unlink()
    doc, path = logged_run(tmp_path)
    assert victim.read_text() == "secret\n"
    assert not path.is_symlink() and path.read_text().startswith(":::MLLOG")
    assert mlperf_log.power_path(path).read_text().count("power_reading") >= 2


def test_removing_a_failed_log_follows_no_planted_power_folder(tmp_path):
    doc, path = logged_run(tmp_path)
    elsewhere = tmp_path / "elsewhere" / path.stem
    elsewhere.mkdir(parents=True)
    (elsewhere / "node_0.txt").write_text("keep\n")
    power = path.parent / mlperf_log.POWER_DIR
    import shutil
    shutil.rmtree(power)
    power.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    mlperf_log.remove(path)
    assert (elsewhere / "node_0.txt").read_text() == "keep\n" and not path.exists()


def test_a_full_disk_mid_log_is_one_error_and_no_logging_report(tmp_path, monkeypatch, capfd):
    """logging's StreamHandler hands a write error to handleError, which prints a
    traceback to stderr and goes on; the writer raises it instead (the entrypoint
    says it in one line) and leaves no file. The full disk: a stream whose writes
    fail with ENOSPC, as the TextIOWrapper over a full tmpfs does."""
    import contextlib
    import errno

    from hpcai.safe_files import Folder

    class FullDisk:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    made = []

    @contextlib.contextmanager
    def replacing_text(self, name, newline=None):
        made.append(name)
        yield FullDisk()

    monkeypatch.setattr(Folder, "replacing_text", replacing_text)
    doc = make_result(gpus=1, per_gpu=1000.0, cap_w=300.0, window_s=10.0)
    with pytest.raises(OSError) as raised:
        mlperf_log.write(tmp_path / mlperf_log.MLLOG_FILE, doc, [])
    assert raised.value.errno == errno.ENOSPC and made == [mlperf_log.MLLOG_FILE]
    assert "Logging error" not in capfd.readouterr().err
    assert not list(tmp_path.iterdir())
