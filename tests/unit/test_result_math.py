"""The numbers a result reports, checked against values worked out by hand."""
import math

import pytest

from hpcai.gpu.base import GpuReading
from hpcai.launcher.run.results import apply_limits, cap_held
from hpcai.workloads import result as R
from hpcai.measure.stats import quantile, summarize, throughput_stats
from hpcai.measure.telemetry import Mark, Sampler, integrate_power_j


def epoch(index, units, duration, warmup=False, start=0.0):
    return {"index": index, "warmup": warmup, "steps": 1, "units": units, "start": start,
            "end": start + duration, "duration_s": duration, "loss": 1.0}


def test_node_throughput_uses_the_slowest_rank_per_epoch_and_skips_warmup():
    ranks = [
        {"epochs": [epoch(0, 999, 0.1, warmup=True), epoch(1, 100, 1.0), epoch(2, 100, 2.0)]},
        {"epochs": [epoch(0, 999, 0.1, warmup=True), epoch(1, 100, 0.5), epoch(2, 100, 2.0)]},
    ]
    tp = R.node_throughput(ranks)
    assert tp["per_epoch_node"] == [200.0, 100.0]  # 200 units / 1 s, 200 units / 2 s
    assert tp["node"] == pytest.approx(400 / 3.0)
    assert tp["per_gpu"] == pytest.approx(200 / 3.0)
    assert tp["per_rank"] == [pytest.approx(200 / 3.0), pytest.approx(200 / 2.5)]
    assert tp["measured_units"] == 400


def test_throughput_stats_match_a_hand_computed_t_interval():
    stats = throughput_stats([10.0, 12.0, 14.0])
    assert stats["mean"] == 12.0
    assert stats["std"] == pytest.approx(2.0)
    half = 4.303 * 2.0 / math.sqrt(3)  # t(0.975, 2 dof)
    assert stats["ci95"] == [pytest.approx(12 - half), pytest.approx(12 + half)]


def test_quantile_and_trapezoid():
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([0, 10], 0.95) == pytest.approx(9.5)
    series = [(0.0, GpuReading(power_w=100)), (1.0, GpuReading(power_w=300)),
              (3.0, GpuReading(power_w=300))]
    assert integrate_power_j(series) == pytest.approx(200 + 600)
    assert summarize([None, 1.0, 3.0])["mean"] == 2.0


def sampler_with(times, powers, marks):
    s = Sampler(sources=[object()], interval_s=0.1)
    s.times = list(times)
    s.readings = [[GpuReading(power_w=p)] for p in powers]
    s.marks = [Mark(label, t, [e]) for label, t, e in marks]
    return s


def test_energy_prefers_the_counter_when_it_agrees_with_integrated_power():
    marks = [("e0.end", -0.5, 900.0), ("e1.start", -0.01, 1000.0), ("e1.end", 1.0, 1100.0),
             ("e2.start", 1.01, 1101.0), ("e2.end", 2.01, 1205.0), ("late", 3.0, 9999.0)]
    s = sampler_with([0, 1, 2], [100, 100, 100], marks)
    energy = R.source_energy(s, 0, 0.0, 2.0)
    assert energy["counter"] == pytest.approx(205.0)
    assert energy["integrated"] == pytest.approx(200.0)
    assert energy["used"] == "counter" and energy["value"] == pytest.approx(205.0)


def test_energy_falls_back_to_integrated_power_when_the_counter_is_off():
    # An AMD-style stuck or wrong counter: 10x what the samples say.
    s = sampler_with([0, 1, 2], [100, 100, 100], [("a", -0.01, 0.0), ("b", 2.01, 2000.0)])
    energy = R.source_energy(s, 0, 0.0, 2.0)
    assert energy["used"] == "integrated" and energy["value"] == pytest.approx(200.0)
    assert "disagree" in energy["note"]


def test_without_marks_the_counter_is_read_from_the_samples():
    # An engine-driven workload: no epoch marks, the counter comes with each tick.
    s = Sampler(sources=[object()], interval_s=0.1)
    s.times = [0.0, 1.0, 2.0, 3.0]
    s.readings = [[GpuReading(power_w=100, energy_j=e)] for e in (0.0, 100.0, 200.0, 300.0)]
    energy = R.source_energy(s, 0, 0.5, 2.5)
    assert energy["counter"] == pytest.approx(200.0)  # interpolated at both edges
    assert energy["used"] == "counter"


def test_integrated_energy_is_stretched_to_the_whole_window():
    # Samples span 1 s of a 2 s window at 50 W mean: 100 J, not 50 J.
    s = sampler_with([0.5, 1.5], [50, 50], [])
    assert R.source_energy(s, 0, 0.0, 2.0)["integrated"] == pytest.approx(100.0)


@pytest.mark.parametrize("median,expected", [(300.0, True), (314.9, True), (316.0, False)])
def test_cap_held_allows_the_stated_tolerance_only(median, expected):
    assert cap_held({"median": median}, 300.0, 0.05) is expected


def test_apply_limits_marks_an_unenforced_cap():
    doc = {"gpus": [{"index": 0, "used": True, "power_w": {"median": 420.0}},
                    {"index": 1, "used": True, "power_w": {"median": 290.0}}],
           "power": {}}
    lim = {"default_w": 700, "min_w": 200, "max_w": 700, "requested_w": 300, "applied_w": 300}
    apply_limits(doc, {0: lim, 1: lim}, 300.0, 0.05)
    assert [g["cap_held"] for g in doc["gpus"]] == [False, True]
    assert doc["power"]["cap"]["enforced"] is False
    assert doc["gpus"][0]["limits"]["requested_w"] == 300
