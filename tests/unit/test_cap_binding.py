"""Does the cap bind? The sampler reads the FAKE pynvml (tests/fakes: reported
power is min(draw, limit), throttle reasons the NVML clocks-event bitmask it
is given), hpcai.measure.cap_binding judges the window, and the report keeps
a cap that never bound out of the recommendation."""
import time

import pytest

from fakes import fake_gpu_state
from hpcai.gpu.base import GpuReading
from hpcai.launcher.report.efficiency import analyse
from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.stats import aggregate
from hpcai.launcher.report.binding_table import binding_table
from hpcai.measure import cap_binding, power_sources
from hpcai.measure.telemetry import Sampler
from report_docs import make_result, write_result

SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap


def sample(monkeypatch, tmp_path, **device):
    """A real Sampler over two fake GPUs for ~0.4 s; cap_binding.section on it."""
    fake_gpu_state.install(monkeypatch, tmp_path / "gpus.json",
                           fake_gpu_state.make_devices(2, "nvidia", **device))
    found = power_sources.discover("auto")
    try:
        sampler = Sampler(found.gpus, interval_s=0.02)
        sampler.start()
        time.sleep(0.4)
        sampler.stop()
        window = (sampler.times[0], sampler.times[-1])
        return cap_binding.section(sampler, found, window, None)
    finally:
        found.close()


def test_a_workload_drawing_below_the_cap_does_not_bind(monkeypatch, tmp_path):
    # A decode-like load: 290 W drawn under a 500 W cap, no throttle reason.
    got = sample(monkeypatch, tmp_path, power_draw_w=290.0, current_limit_w=500.0,
                 throttle_reasons=0)
    assert got["binds"] is False
    assert got["limit_w"] == pytest.approx(500.0)
    assert got["power_drawn_w"]["max"] == pytest.approx(290.0)
    assert got["peak_share_of_limit"] == pytest.approx(0.58)  # 290 W of 500 W
    assert got["power_cap_throttle_share"] == 0.0 and got["near_cap_share"] == 0.0
    assert [g["index"] for g in got["per_gpu"]] == [0, 1]


def test_a_workload_held_at_the_cap_binds(monkeypatch, tmp_path):
    # 650 W wanted, 400 W cap: the fake reports 400 W and the SwPowerCap reason.
    got = sample(monkeypatch, tmp_path, power_draw_w=650.0, current_limit_w=400.0,
                 throttle_reasons=SW_POWER_CAP)
    assert got["binds"] is True
    assert got["power_cap_throttle_share"] == 1.0 and got["near_cap_share"] == 1.0
    assert got["power_drawn_w"]["max"] == pytest.approx(400.0)


def reading(power, reasons, limit=700.0):
    return GpuReading(power_w=power, power_limit_w=limit, throttle_reasons=reasons)


def test_throttle_share_counts_only_ticks_that_read_the_reasons():
    # 10 ticks: reasons read on 4 (None = not read that tick), the cap reason on 1 of them.
    series = [(i, reading(300.0, None)) for i in range(6)]
    series += [(6, reading(300.0, ["sw_power_cap"])), (7, reading(300.0, [])),
               (8, reading(300.0, ["hw_slowdown"])), (9, reading(300.0, []))]
    got = cap_binding.gpu_binding(series)
    assert got["power_cap_throttle_share"] == pytest.approx(0.25)
    assert got["near_cap_share"] == 0.0  # 300 W < 95% of 700 W
    assert got["binds"] is True  # 25% >= the 10% threshold


def test_near_cap_power_alone_binds_where_the_reasons_cannot_be_read():
    # 3 of 10 samples at >= 95% of 300 W (285 W); no throttle reasons readable at all.
    series = [(i, reading(p, None, 300.0)) for i, p in
              enumerate([200.0] * 7 + [290.0, 299.0, 285.0])]
    got = cap_binding.gpu_binding(series)
    assert got["power_cap_throttle_share"] is None
    assert got["near_cap_share"] == pytest.approx(0.3)
    assert got["binds"] is True


def test_nothing_read_is_unknown_not_unbound():
    assert cap_binding.gpu_binding([])["binds"] is None


def with_binding(doc, binds, low, high):
    doc["power"]["cap_binding"] = {
        "binds": binds, "limit_w": doc["spec"]["power"]["cap_w"],
        "power_drawn_w": {"min": low, "mean": (low + high) / 2, "max": high}, "per_gpu": []}
    return doc


def test_a_cap_that_never_bound_is_not_recommended_and_the_clock_knob_is(tmp_path):
    # Decode-like serving: 137-290 W drawn at every cap from 300 W up; only 200 W bound.
    # Made-up efficiencies favour 400 W (noise), which must not be recommended.
    rows = [(200.0, 800.0, 200.0, True, 180.0, 200.0),
            (300.0, 1000.0, 210.0, False, 137.0, 285.0),
            (400.0, 1001.0, 200.0, False, 140.0, 290.0),
            (500.0, 1000.0, 212.0, False, 139.0, 288.0)]
    for cap, per_gpu, power, binds, low, high in rows:
        write_result(tmp_path, with_binding(
            make_result(workload="llama3_8b_inference", unit="tokens", cap_w=cap,
                        per_gpu=per_gpu, power_per_gpu_w=power), binds, low, high))
    runs, _ = read_runs([tmp_path])
    (a,) = analyse(aggregate(runs, None, 0.05), 0.10)
    # 500 W is the baseline (the highest non-binding cap); 300 and 400 W are left out.
    assert sorted(c.cap_w for c in a.candidates) == [200.0, 500.0]
    assert a.recommended.cap_w == 500.0
    note = next(n for n in a.notes if "did not bind" in n)
    assert "300 W, 400 W" in note and "--sm-clock" in note
    assert "at or above 300 W the GPU never reached the cap: 137-290 W drawn" in note
    table = binding_table([a])
    (row,) = table.rows
    assert [c.text for c in row[2:5]] == ["200 W", "300 W, 400 W, 500 W", "–"]
    assert any("--sm-clock" in n for n in table.notes)


def test_results_without_a_binding_verdict_keep_every_cap(tmp_path):
    for cap in (300.0, 400.0):
        write_result(tmp_path, make_result(cap_w=cap))
    runs, _ = read_runs([tmp_path])
    (a,) = analyse(aggregate(runs, None, 0.05), 0.10)
    assert len(a.candidates) == 2 and not any("did not bind" in n for n in a.notes)
