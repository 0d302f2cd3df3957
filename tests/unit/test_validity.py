"""Validity checks (hpcai/measure/validity.py): each one failing on purpose on a
crafted result (tests/report_docs.py) that otherwise passes, a CPU run's GPU
checks not applicable, the settle drift of in-run segments, an idle FAKE GPU
read through the real sampler, and how the report treats failed and older
results."""
import copy
import json

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report.load import read_runs
from hpcai.measure import power_sources, validity
from hpcai.workloads import result as R
from hpcai.measure.telemetry import Sampler
from report_docs import make_result, write_result


def good_doc(**kw) -> dict:
    doc = make_result(gpus=2, cap_w=300.0, power_per_gpu_w=280.0, window_s=60.0, **kw)
    doc["power"]["quality"] = {"min_window_s": 10.0, "window_short": False,
                               "power_samples_expected": 600, "power_samples_min": 598,
                               "samples_short": False}
    doc["protocol"]["sample_interval_achieved_s"] = {"mean": 0.1, "median": 0.1, "p95": 0.11,
                                                     "max": 0.2}
    for g in doc["gpus"]:
        g.update(utilization_pct_mean=97.0, temperature_c={"mean": 60.0, "median": 60.0,
                                                           "p95": 64.0, "max": 65.0},
                 throttle_reasons={"sw_power_cap": 0.9})
    doc["launcher"]["gpu_limits"] = [{"index": i, "requested_w": 300.0, "enforced_at_start_w": 300.0,
                                      "enforced_at_end_w": 300.0} for i in range(2)]
    return doc


def verdict_of(doc, name, subject=None) -> str:
    found = validity.evaluate(doc, "check")
    hits = [c for c in found["checks"] if c["name"] == name
            and (subject is None or c["subject"] == subject)]
    assert hits, name
    worst = max((c["verdict"] for c in hits), key=["n/a", "pass", "warn", "fail"].index)
    return worst


def test_a_sound_result_passes_every_check_and_matches_the_schema(result_schema):
    import jsonschema

    doc = good_doc()
    found = validity.evaluate(doc, "launcher")
    assert found["verdict"] == "pass" and found["failed"] == [], found
    names = {c["name"] for c in found["checks"]}
    assert names == {"window_length", "sample_coverage", "sample_interval", "energy_agreement",
                     "power_range", "enforced_limit", "gpu_utilisation", "temperature", "throttle",
                     "throughput_cv", "slow_epoch", "loss_finite", "settle_drift"}
    doc["validity"] = found
    jsonschema.validate(doc, result_schema)


def _break(doc, what):
    gpu = doc["gpus"][0]
    if what == "window_length":
        doc["power"]["window_s"] = 0.4
    elif what == "sample_coverage":
        doc["power"]["quality"]["power_samples_min"] = 200  # a third of the 600 expected
    elif what == "sample_interval":
        doc["protocol"]["sample_interval_achieved_s"]["median"] = 2.0
    elif what == "energy_agreement":
        gpu["energy_j"]["counter"] = gpu["energy_j"]["integrated"] * 1.5
    elif what == "power_range":  # overdraw: above the 700 W maximum x 1.05
        gpu["power_w"].update(p95=760.0, max=780.0)
    elif what == "enforced_limit":
        doc["launcher"]["gpu_limits"][1]["enforced_at_end_w"] = 250.0
    elif what == "gpu_utilisation":  # a starved GPU
        gpu["utilization_pct_mean"] = 12.0
    elif what == "temperature":
        gpu["temperature_c"]["max"] = 97.0
    elif what == "throttle":
        gpu["throttle_reasons"] = {"sw_power_cap": 0.5, "hw_thermal": 0.3}
    elif what == "throughput_cv":
        doc["throughput"]["stats_node"]["cv"] = 0.8
    elif what == "slow_epoch":  # one stalled epoch among three
        doc["throughput"]["per_epoch_node"][1] *= 0.3
    elif what == "settle_drift":  # as issue 16's in-run segments record it (workloads/inrun.py)
        doc["segment"] = {"index": 2, "in_run": True, "cap_w": 300.0}
        doc["measurement"] = {"settle": {
            "stopped": "max_settle", "settled": False,
            "drift_at_start": {"temperature_c": 2.5, "power_frac": 0.002},
            "thresholds": {"temperature_c": 0.5, "power_frac": 0.01}}}


@pytest.mark.parametrize("name", ["window_length", "sample_coverage", "sample_interval",
                                  "energy_agreement", "power_range", "enforced_limit",
                                  "gpu_utilisation", "temperature", "throttle", "throughput_cv",
                                  "slow_epoch", "settle_drift"])
def test_each_check_fails_on_purpose(name):
    doc = good_doc()
    _break(doc, name)
    found = validity.evaluate(doc)
    assert found["verdict"] == "fail" and found["failed"] == [name], found["failed"]
    (bad,) = validity.failed_checks(found)
    assert bad["threshold"] and bad["value"] is not None
    assert validity.describe(bad).startswith(name)


def test_an_idle_gpu_below_its_baseline_fails_power_range():
    doc = good_doc()
    doc["launcher"]["idle_baseline"] = {"source": "sweep idle baseline, 5.0 s",
                                        "devices": [{"index": 0, "mean_power_w": 290.0},
                                                    {"index": 1, "mean_power_w": 70.0}]}
    assert verdict_of(doc, "power_range", "GPU 0") == "fail"
    assert verdict_of(doc, "power_range", "GPU 1") == "pass"
    # A cap below the idle baseline leaves no lower bound to hold the GPU to.
    doc["spec"]["power"]["cap_w"] = 250.0
    assert verdict_of(doc, "power_range", "GPU 0") == "pass"


def test_warnings_do_not_fail_a_result():
    doc = good_doc()
    doc["power"]["window_s"] = 5.0
    doc["throughput"]["stats_node"]["cv"] = 0.07
    found = validity.evaluate(doc)
    assert found["verdict"] == "warn" and found["failed"] == []


def test_a_cpu_run_gets_the_gpu_checks_as_not_applicable():
    doc = make_result(device_type="cpu", cap_w=None, window_s=0.3)
    found = validity.evaluate(doc)
    by_name = {c["name"]: c for c in found["checks"]}
    for name in ("energy_agreement", "power_range", "gpu_utilisation", "temperature", "throttle",
                 "enforced_limit", "settle_drift", "sample_coverage"):
        assert by_name[name]["verdict"] == "n/a", by_name[name]
    # Without power, a short window is a smoke test (warn), not a failed energy figure.
    assert by_name["window_length"]["verdict"] == "warn"
    assert found["verdict"] != "fail"


def test_the_settle_drift_is_read_when_a_segment_has_one():
    doc = good_doc()
    (only,) = [c for c in validity.evaluate(doc)["checks"] if c["name"] == "settle_drift"]
    assert only["verdict"] == "n/a" and "not applicable" in only["note"]
    # Issue 16's record: measurement.settle beside the segment block, its own thresholds.
    doc["segment"] = {"index": 1, "in_run": True, "cap_w": 300.0}
    settle = {"stopped": "settled", "settled": True,
              "drift_at_start": {"temperature_c": 0.2, "power_frac": 0.004},
              "thresholds": {"temperature_c": 0.5, "power_frac": 0.01}}
    doc["measurement"] = {"settle": settle, "window": {}}

    def settle_check():
        (c,) = [c for c in validity.evaluate(doc)["checks"] if c["name"] == "settle_drift"]
        return c

    assert (settle_check()["subject"], settle_check()["verdict"]) == ("segment 1", "pass")
    settle.update(stopped="max_settle", settled=False,
                  drift_at_start={"temperature_c": 0.9, "power_frac": 0.004})
    assert settle_check()["verdict"] == "warn"  # above its threshold, under 3x
    settle["thresholds"]["temperature_c"] = 0.25
    assert settle_check()["verdict"] == "fail"  # 0.9 is 3.6x the record's own 0.25
    settle.update(stopped="no telemetry", drift_at_start={"temperature_c": None, "power_frac": None})
    assert settle_check()["verdict"] == "n/a"
    # Several segments in one document (segments[].settle) each get their check.
    del doc["measurement"], doc["segment"]
    doc["segments"] = [{"index": 0, "settle": {"settled": True, "drift": {
        "temperature_c": 0.2, "power_frac": 0.004}}},
                       {"index": 1, "settle": {"settled": False, "settle_temperature_c": 1.0,
                                               "drift": {"temperature_c": 1.5, "power_frac": 0.0}}}]
    checks = [c for c in validity.evaluate(doc)["checks"] if c["name"] == "settle_drift"]
    assert [(c["subject"], c["verdict"]) for c in checks] == [("segment 0", "pass"),
                                                             ("segment 1", "warn")]


def test_an_idle_fake_gpu_read_by_the_real_sampler_fails_utilisation(tmp_path, monkeypatch):
    """FAKE H100s idling at 60 W and 0% load while a GPU workload was said to run."""
    fgs.install(monkeypatch, tmp_path / "gpus.json",
                fgs.make_devices(1, "nvidia", power_draw_w=60.0, utilization_pct=0.0))
    found = power_sources.discover("auto")
    sampler = Sampler(found.gpus, 0.05)
    try:
        sampler.start()
        start = sampler.mark("start").t
        import time
        time.sleep(1.3)  # one full read (utilisation) a second, and the marks ask for one
        end = sampler.mark("end").t
        time.sleep(0.15)
        sampler.stop()
        spec = {"power": {"node_overhead_w": 100.0}, "devices": {"gpu_indices": [0]},
                "protocol": {"telemetry": True}}
        gpus, _, power = R.power_section(spec, found, sampler, (start, end), 100)
    finally:
        found.close()
    doc = good_doc()
    doc["gpus"], doc["power"] = gpus, {**doc["power"], **power}
    doc["launcher"]["gpu_limits"] = doc["launcher"]["gpu_limits"][:1]
    doc["launcher"]["idle_baseline"] = {"source": "sweep", "devices": [{"index": 0,
                                                                         "mean_power_w": 70.0}]}
    assert gpus[0]["utilization_pct_mean"] == 0.0
    assert verdict_of(doc, "gpu_utilisation") == "fail"
    assert verdict_of(doc, "power_range") == "fail"  # 60 W, below the 70 W idle baseline


def test_the_report_leaves_failed_results_out_and_keeps_older_ones(tmp_path):
    older = make_result(cap_w=200.0, per_gpu=800.0)  # no validity: written before it existed
    checked = good_doc(per_gpu=900.0)
    checked["validity"] = validity.evaluate(checked, "launcher")
    failed = good_doc(per_gpu=5000.0)
    failed["spec"]["power"]["cap_w"] = 400.0
    failed["run_id"] += "-overdraw"
    for g in failed["gpus"]:
        g["power_w"]["p95"] = 800.0
    failed["validity"] = validity.evaluate(failed, "launcher")
    for doc in (older, checked, failed):
        write_result(tmp_path / "results", copy.deepcopy(doc))
    runs, _ = read_runs([tmp_path / "results"])
    by_id = {r.run_id: r for r in runs}
    assert by_id[older["run_id"]].usable and by_id[older["run_id"]].validity_verdict is None
    assert by_id[checked["run_id"]].usable and by_id[checked["run_id"]].validity_verdict == "pass"
    bad = by_id[failed["run_id"]]
    assert not bad.usable and bad.failed_checks == ["power_range"]
    assert "power_range (GPU 0)" in bad.problems[0]

    rep = make_report([tmp_path / "results"], ReportOptions(output=str(tmp_path / "report")))
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert all(c["throughput_per_gpu"] != 5000.0 for c in doc["cells"])  # never averaged
    assert [e["failed_checks"] for e in doc["excluded_runs"]] == [["power_range"]]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "✗ power\\_range" in md and "predate validity checks" in md  # Markdown-escaped
    assert rep["usable"] == 2


def test_check_prints_each_results_table_and_evaluates_older_ones_now(tmp_path, capsys):
    from hpcai.launcher.cli.check import check_results

    older = write_result(tmp_path, good_doc())  # no validity block: written before it existed
    failed = good_doc()
    failed["run_id"] += "-hot"
    failed["gpus"][1]["temperature_c"]["max"] = 99.0
    failed["validity"] = validity.evaluate(failed, "launcher")
    failed_path = write_result(tmp_path, failed)
    assert check_results([str(older)]) == 0
    out = capsys.readouterr().out
    assert "validity PASS" in out and "computed now: the result predates validity checks" in out
    assert check_results([str(older), str(failed_path.parent)]) == 1  # a run folder works too
    out = capsys.readouterr().out
    # Recomputed, never taken as written; the stored verdict is named beside it.
    assert "recomputed with this version's thresholds; the stored verdict (by the launcher) " \
        "was FAIL: agrees" in out
    (row,) = [line for line in out.splitlines() if "temperature" in line and "GPU 1" in line
              and "FAIL" in line]
    assert "99 °C" in row and "<= 85 °C (fail above 95 °C)" in row


def test_a_wide_spread_over_two_epochs_is_a_warning_not_a_failure():
    doc = good_doc()
    doc["throughput"]["stats_node"].update(cv=0.8, epochs=3)
    assert verdict_of(doc, "throughput_cv") == "fail"
    doc["throughput"]["stats_node"].update(epochs=2)
    cv = next(c for c in validity.evaluate(doc)["checks"] if c["name"] == "throughput_cv")
    assert cv["verdict"] == "warn" and "only 2 measured epochs" in cv["note"]


def test_one_stalled_epoch_among_few_fails_where_the_cv_does_not():
    """Issue 25: 4 epochs at 100, 100, 100, 40 (one stalled) have a CV of 0.35,
    under cv_fail: only the slow-epoch check, against the others' median, fails it."""
    per_gpu = [100.0, 100.0, 40.0, 100.0]
    doc = good_doc(epochs=per_gpu)
    found = validity.evaluate(doc)
    by_name = {c["name"]: c for c in found["checks"]}
    assert by_name["throughput_cv"]["verdict"] != "fail"
    assert by_name["slow_epoch"]["verdict"] == "fail"
    assert by_name["slow_epoch"]["value"] == pytest.approx(0.4)
    assert "measured epoch 3 of 4" in by_name["slow_epoch"]["note"]
    assert found["failed"] == ["slow_epoch"]
    # Two epochs are enough to see one stall; ordinary noise is not one.
    assert verdict_of(good_doc(epochs=[100.0, 30.0]), "slow_epoch") == "fail"
    assert verdict_of(good_doc(epochs=[100.0, 97.0, 103.0]), "slow_epoch") == "pass"
    assert verdict_of(good_doc(epochs=[100.0, 70.0, 100.0]), "slow_epoch") == "warn"
    assert verdict_of(good_doc(epochs=[100.0]), "slow_epoch") == "n/a"


def test_a_slow_epoch_on_the_cpu_is_a_warning():
    doc = make_result(device_type="cpu", cap_w=None, epochs=[10.0, 10.0, 2.0])
    (c,) = [c for c in validity.evaluate(doc)["checks"] if c["name"] == "slow_epoch"]
    assert c["verdict"] == "warn" and "CPU run" in c["note"]


def test_instant_power_is_held_to_the_limit_over_its_one_second_window():
    """An H100 at 700 W read through NVML's instant field: p95 828 W, 1 s mean at
    most 705 W (the GPU kit, 2026-11-28). The limit governs the 1 s average
    (NVML docs, nvmlDeviceGetPowerUsage), so only the smoothed figure is held to it."""
    doc = good_doc()
    gpu = doc["gpus"][0]
    gpu.update(power_source="instant", power_w_1s_p95=705.0)
    gpu["power_w"].update(mean=670.0, p95=828.0, max=857.0)
    assert verdict_of(doc, "power_range", "GPU 0") == "pass"
    gpu["power_w_1s_p95"] = 760.0  # over 700 W x 1.05 even when smoothed: a broken cap
    assert verdict_of(doc, "power_range", "GPU 0") == "fail"
    # A result without the smoothed figure falls back to the mean, not the raw p95.
    gpu["power_w_1s_p95"] = None
    assert verdict_of(doc, "power_range", "GPU 0") == "pass"
    gpu["power_w"]["mean"] = 750.0
    assert verdict_of(doc, "power_range", "GPU 0") == "fail"
    # An averaged source keeps the raw p95 (it is already the 1 s mean).
    gpu.update(power_source="average")
    gpu["power_w"].update(mean=670.0, p95=760.0)
    assert verdict_of(doc, "power_range", "GPU 0") == "fail"


def test_a_settle_drift_within_its_fits_noise_passes():
    doc = good_doc()
    doc["segment"] = {"index": 2, "settle": {
        "seconds": 5.0, "epochs": 14, "stopped": "max_settle", "settled": False,
        "drift_at_start": {"temperature_c": 0.1, "power_frac": 0.06, "power_frac_se": 0.04}}}
    (c,) = [c for c in validity.evaluate(doc)["checks"] if c["name"] == "settle_drift"]
    # Power within its noise: the temperature (0.1 of 0.5) is the worst; not settled: warn.
    assert c["verdict"] == "warn" and c["value"] == pytest.approx(0.2) and "se 0.04" in c["note"]
    doc["segment"]["settle"]["drift_at_start"]["power_frac_se"] = 0.001  # the same drift, clear of noise
    (c,) = [c for c in validity.evaluate(doc)["checks"] if c["name"] == "settle_drift"]
    assert c["verdict"] == "fail"
