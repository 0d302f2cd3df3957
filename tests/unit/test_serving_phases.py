"""Prefill/decode split of serving energy, from per-request time stamps, on a
synthetic power trace whose energies are worked out by hand."""
import pytest

from hpcai.gpu.base import GpuReading
from hpcai.measure import serving_phases
from hpcai.measure.telemetry import Sampler


def trace() -> Sampler:
    """Two GPUs every 0.5 s from t=0 to 6: 400 W together up to t=3, 200 W from
    t=3.5 (linear in between)."""
    sampler = Sampler([], interval_s=0.5)
    for k in range(13):
        t = k * 0.5
        high = t <= 3.0
        sampler.times.append(t)
        sampler.readings.append([GpuReading(power_w=250.0 if high else 100.0),
                                 GpuReading(power_w=150.0 if high else 100.0)])
    return sampler


REQUESTS = [
    {"start": 0.0, "ttft": 1.0, "latency": 5.0, "success": True},  # prefill 0-1, decode 1-5
    {"start": 2.0, "ttft": 1.0, "latency": 4.0, "success": True},  # prefill 2-3, decode 3-6
    {"start": 1.0, "ttft": 0.5, "latency": 0.5, "success": False},  # failed: not counted
]


def test_phase_intervals_give_prefill_priority_over_decode():
    got = serving_phases.phase_intervals(REQUESTS)
    assert got["prefill"] == [(0.0, 1.0), (2.0, 3.0)]
    assert got["decode"] == [(1.0, 2.0), (3.0, 6.0)]


def test_energy_per_phase_and_per_token_against_the_hand_computed_trace():
    got = serving_phases.split(trace(), [0, 1], REQUESTS, input_tokens=1000, output_tokens=500)
    # Prefill: [0,1] and [2,3] at 400 W = 800 J over 2 s.
    assert got["prefill"]["duration_s"] == pytest.approx(2.0)
    assert got["prefill"]["energy_j"] == pytest.approx(800.0)
    assert got["prefill"]["j_per_input_token"] == pytest.approx(0.8)
    # Decode: [1,2] at 400 W = 400 J; [3,3.5] 400->200 W = 150 J; [3.5,6] at 200 W = 500 J.
    assert got["decode"]["duration_s"] == pytest.approx(4.0)
    assert got["decode"]["energy_j"] == pytest.approx(1050.0)
    assert got["decode"]["mean_power_w"] == pytest.approx(262.5)
    assert got["decode"]["j_per_output_token"] == pytest.approx(2.1)


def test_a_phase_outside_the_samples_has_no_energy_rather_than_a_partial_one():
    late = [{"start": 5.0, "ttft": 0.5, "latency": 3.0, "success": True}]  # decode runs to 8 s
    got = serving_phases.split(trace(), [0, 1], late, 10, 10)
    assert got["prefill"]["energy_j"] == pytest.approx(100.0)  # [5, 5.5] at 200 W
    assert got["decode"]["energy_j"] is None and got["decode"]["j_per_output_token"] is None


def test_the_report_shows_prefill_and_decode_per_cap(tmp_path):
    import json

    from hpcai.launcher.report import ReportOptions, make_report
    from report_docs import make_result, write_result

    for cap, decode_j in ((300.0, 0.5), (500.0, 0.6)):
        doc = make_result(workload="llama3-8b-inference", unit="tokens", cap_w=cap, gpus=4)
        doc["workload_metrics"] = {"serving_phases": {
            "prefill": {"intervals": 3, "duration_s": 2.0, "energy_j": 1600.0,
                        "mean_power_w": 800.0, "j_per_input_token": 0.8},
            "decode": {"intervals": 3, "duration_s": 8.0, "energy_j": 4000.0,
                       "mean_power_w": 500.0, "j_per_output_token": decode_j},
            "input_tokens": 2000, "output_tokens": 8000}}
        write_result(tmp_path / "results", doc)
    make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "report"))
    table = json.loads((tmp_path / "report" / "report.json").read_text())["tables"]["serving_phases"]
    rows = {r[2]: r for r in table["rows"]}
    assert rows["300 W"][5] == "0.8" and rows["300 W"][8] == "0.5"
    assert rows["500 W"][8] == "0.6" and rows["500 W"][7] == "500"
