"""Settle and adaptive stopping (hpcai/measure/adaptive.py) on synthetic series
whose variance and drift are known, so the expected stopping point is too."""
import math
import random
import statistics

import pytest

from hpcai.measure import adaptive
from hpcai.workloads.declaration import CPU_TINY_WINDOWS
from hpcai.measure.adaptive import Block, StopRule


def blocks_until_stop(rule: StopRule, rng: random.Random, mean: float, cv: float,
                      block_s: float = 1.0, watts: float = 500.0) -> tuple[int, str, list]:
    """Feed blocks of known throughput noise (power constant) until the rule stops."""
    blocks: list[Block] = []
    while True:
        rate = rng.gauss(mean, cv * mean)
        units = rate * block_s
        blocks.append(Block(units, block_s, watts * block_s))
        why = rule.decide(blocks, samples=len(blocks) * 10)
        if why is not None:
            return len(blocks), why, blocks


def test_adaptive_stopping_stops_near_the_block_count_the_variance_predicts():
    """cv 5%, target 2%: the 95% half-width 1.96*cv/sqrt(n) falls under the
    target at n = (1.96*0.05/0.02)^2 = 24 blocks; over many seeded series the
    median stop lies near it, and each stop meets the target it claims."""
    cv, target = 0.05, 0.02
    expected = (1.96 * cv / target) ** 2
    rule = StopRule(target, min_s=3.0, min_samples=30, max_s=1000.0)
    stops = []
    for seed in range(200):
        n, why, blocks = blocks_until_stop(rule, random.Random(seed), 100.0, cv)
        assert why == "target"
        widths = rule.half_widths(blocks)
        assert widths["throughput_frac"] <= target
        assert widths["energy_per_unit_frac"] <= target
        stops.append(n)
    assert 0.7 * expected <= statistics.median(stops) <= 1.4 * expected, statistics.median(stops)
    # A noisier series needs more blocks: about 4x for twice the cv.
    noisy = [blocks_until_stop(rule, random.Random(s), 100.0, 2 * cv)[0] for s in range(100)]
    assert statistics.median(noisy) > 3 * statistics.median(stops)


def test_the_minimum_and_maximum_window_bound_the_stop():
    # Noise-free blocks meet any target at once, but not before the minimum window.
    rule = StopRule(0.01, min_s=10.0, min_samples=30, max_s=60.0)
    blocks = [Block(100, 1.0, 500.0) for _ in range(9)]
    assert rule.decide(blocks, samples=90) is None  # 9 s < 10 s
    blocks.append(Block(100, 1.0, 500.0))
    assert rule.decide(blocks, samples=29) is None  # too few power samples
    assert rule.decide(blocks, samples=100) == "target"
    # An unreachable target stops at the maximum window.
    n, why, _ = blocks_until_stop(StopRule(0.0001, 1.0, 1, 20.0), random.Random(1), 100.0, 0.1)
    assert (n, why) == (20, "max_window")
    # No target (the fixed protocol): only the maximum stops it.
    assert StopRule(None, 1.0, 1, 5.0).decide([Block(1, 1.0, 1.0)] * 4, 100) is None


def test_energy_per_unit_must_meet_the_target_too_when_it_is_measured():
    rng = random.Random(7)
    rule = StopRule(0.02, min_s=1.0, min_samples=1, max_s=1e6)
    # Steady throughput, power noisy by 10%: throughput alone would stop at once.
    blocks = [Block(100, 1.0, rng.gauss(500, 50)) for _ in range(5)]
    assert rule.half_widths(blocks)["throughput_frac"] == 0
    assert rule.decide(blocks, 100) is None
    # Without energy (no telemetry) the throughput decides.
    assert rule.decide([Block(100, 1.0, None)] * 5, 100) == "target"


def test_relative_half_width_is_students_t_interval_over_the_mean():
    values = [9.0, 10.0, 11.0]
    half = 4.303 * 1.0 / math.sqrt(3)  # t(0.975, 2) * s / sqrt(n)
    assert adaptive.relative_half_width(values) == pytest.approx(half / 10.0)
    assert adaptive.relative_half_width([5.0]) is None


def test_settle_needs_both_drifts_below_their_thresholds():
    protocol = adaptive.window_settings({}, {})
    window = protocol["settle_window_s"]
    times = [i * 0.1 for i in range(200)]  # 20 s at 100 ms
    rng = random.Random(3)
    flat_power = [(t, 500 + rng.gauss(0, 2)) for t in times]
    # Heating by 0.2 degrees C per second: 2 degrees C over the 10 s window.
    warming = [(t, 40 + 0.2 * t) for t in times]
    found = adaptive.drift(flat_power, warming, window)
    assert found["temperature_c"] == pytest.approx(2.0, rel=0.01)
    assert abs(found["power_frac"]) < 0.01
    assert not adaptive.is_settled(found, protocol)
    steady = adaptive.drift(flat_power, [(t, 60.0) for t in times], window)
    assert adaptive.is_settled(steady, protocol)
    # Power still falling by 5% over the window after a cap change: not settled.
    falling = [(t, 600 - 3.0 * t) for t in times]
    assert not adaptive.is_settled(adaptive.drift(falling, [(t, 60.0) for t in times], window),
                                   protocol)
    # Too few samples: unknown, never settled on power.
    assert adaptive.drift(flat_power[:2], [], window)["power_frac"] is None


def test_window_settings_and_their_checks():
    assert adaptive.resolve_protocol({"epochs": 3}, {}) == {"epochs": 3}
    filled = adaptive.resolve_protocol({"ci_target": 0.01}, CPU_TINY_WINDOWS)
    assert filled["min_window_s"] == CPU_TINY_WINDOWS["min_window_s"]
    assert adaptive.resolve_protocol({"ci_target": 0.01}, {})["min_window_s"] == 30.0
    assert adaptive.resolve_protocol({"ci_target": "off"}, CPU_TINY_WINDOWS).get("ci_target") is None
    assert adaptive.resolve_protocol({}, CPU_TINY_WINDOWS, in_run=True)["settle_max_s"] > 0
    assert "between 0 and 1" in adaptive.check_window_settings({"ci_target": 1.0})
    assert "shorter than" in adaptive.check_window_settings(
        {"min_window_s": 30.0, "max_window_s": 10.0})
    assert adaptive.check_window_settings(filled) is None


def test_litgpts_step_clock_runs_a_program_of_epochs():
    """LitGPT's loop calls the clock after every step; a program (what the
    in-run sweep and adaptive windows run) decides each epoch's length."""
    from hpcai.workloads.llm_pretrain import ProgramClock
    from hpcai.workloads.protocol import Progress

    seen = []

    def program():
        seen.append((yield (2, True)))
        seen.append((yield (3, False)))

    progress = Progress()
    protocol = {"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 4}
    clock = ProgramClock(protocol, 100, progress, None, program())
    done = [clock.step(float(i), float(i), 0.5, 1.0) for i in range(1, 6)]
    assert done == [False, False, False, False, True]  # the loop ends after the program's last
    assert [(e.warmup, e.steps, e.units) for e in progress.epochs] == [(True, 2, 200),
                                                                        (False, 3, 300)]
    assert seen == progress.epochs
    assert clock.total_steps == 12  # LitGPT's learning-rate warm-up: the fixed protocol's


def test_blocks_are_calibrated_from_the_settle_s_typical_step_not_its_first():
    """The first settle epoch is a few slow steps (just after the warm-up); the
    blocks must still last at least block_s at the step time that follows, not
    half of it (they are meant to span one sensor update)."""
    import time
    from types import SimpleNamespace

    from hpcai.workloads.inrun import Measurer
    from hpcai.workloads.protocol import Epoch, Progress

    sampler = SimpleNamespace(times=[], readings=[], sources=[0])
    protocol = {"steps_per_epoch": 3, "block_s": 0.2, "sample_interval_s": 0.1,
                "settle_window_s": 0.05, "settle_max_s": 10.0,
                "settle_temperature_c": 0.5, "settle_power_frac": 0.01}
    measurer = Measurer(SimpleNamespace(), protocol, SimpleNamespace(rank=0, distributed=False),
                        sampler, Progress(), counted=[0])
    settle = measurer.settle()
    steps = next(settle)
    # Step times: 20 ms for the first 3 steps, then 9 ms (the power series flat).
    for i, step_s in enumerate([0.020, 0.009, 0.009]):
        if i == 2:
            time.sleep(0.06)  # past settle_window_s, so this epoch ends the settle
        now = time.time()
        for k in range(5):
            sampler.times.append(now + k * 1e-3)
            sampler.readings.append([SimpleNamespace(power_w=400.0, temperature_c=50.0)])
        epoch = Epoch(i, True, steps[0], steps[0], now, now, steps[0] * step_s, 1.0)
        try:
            steps = settle.send(epoch)
        except StopIteration as stop:
            record = stop.value
            break
    assert record["stopped"] == "settled" and record["epochs"] == 3
    assert measurer.block_steps * 0.009 >= 0.2  # the first epoch alone gave 10 steps: 0.09 s


def test_noise_is_no_drift_but_a_trend_through_noise_is():
    """An H100's instant power at a steady 650 W swings +-20% reading to reading
    (the GPU kit, 2026-11-28): a 1 s window's fitted slope is then mostly noise,
    and the settle rule waits only for a drift that stands out of it."""
    protocol = {**adaptive.window_settings({}, {}), "settle_window_s": 1.0}
    rng = random.Random(7)
    times = [i * 0.1 for i in range(60)]
    steady = [(t, 650 + rng.gauss(0, 80)) for t in times]
    cool = [(t, 60.0) for t in times]
    found = adaptive.drift(steady, cool, 1.0)
    assert found["power_frac_se"] > 0.01  # the raw slope alone could not settle
    assert adaptive.significant_drift(found, "power_frac") <= abs(found["power_frac"])
    assert adaptive.is_settled(found, protocol)
    # The same noise on a power still falling 150 W a second after a cap change.
    falling = [(t, 900 - 150 * t + rng.gauss(0, 80)) for t in times]
    assert not adaptive.is_settled(adaptive.drift(falling, cool, 1.0), protocol)
    # A record without standard errors (an older result) is read as before.
    assert adaptive.significant_drift({"power_frac": -0.03}, "power_frac") == 0.03
