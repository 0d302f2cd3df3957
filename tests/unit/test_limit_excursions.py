"""Issue 25, section 1 (second bullet): the limit in force is checked over the
whole window, and an uncapped run is checked too.

Faults covered: an uncapped run on GPUs someone else had capped completed as
valid (and the report used it as the uncapped figure); a limit changed during
the run and changed back before its end went unnoticed (only the limits at
start and end were checked). The sampler is the real one, reading the FAKE
pynvml (tests/fakes)."""
from __future__ import annotations

import time

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.measure import power_sources, validity
from hpcai.measure.telemetry import Sampler, window_stats
from report_docs import make_result


def doc_with(cap_w, start_w, end_w, window=None, held_by=None, default_w=700.0) -> dict:
    doc = make_result(gpus=1, cap_w=cap_w, power_per_gpu_w=280.0, window_s=60.0)
    doc["launcher"]["gpu_limits"] = [{"index": 0, "default_w": default_w, "requested_w": cap_w,
                                      "enforced_at_start_w": start_w, "enforced_at_end_w": end_w,
                                      "held_by": held_by}]
    if window is not None:
        doc["gpus"][0]["power_limit_w_min"], doc["gpus"][0]["power_limit_w_max"] = window
    return doc


def enforced(doc) -> dict:
    (found,) = [c for c in validity.evaluate(doc, "launcher")["checks"] if c["name"] == "enforced_limit"]
    return found


def wait_for_reading(sampler: Sampler, want_w: float, after: int, timeout_s: float = 60.0) -> int:
    """Index of the first reading after `after` whose limit is want_w (the sampler
    decides when it reads: wait for what it saw, not for a time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        readings = list(sampler.readings)
        for k in range(after, len(readings)):
            if readings[k][0].power_limit_w == pytest.approx(want_w):
                return k
        time.sleep(0.01)
    raise AssertionError(f"the sampler never read a {want_w} W limit")


def test_an_excursion_mid_window_shows_in_the_sampled_limits_and_fails(tmp_path, monkeypatch):
    state = tmp_path / "gpus.json"
    fgs.install(monkeypatch, state, fgs.make_devices(1, "nvidia", current_limit_w=300.0))
    found = power_sources.discover("auto")
    try:
        sampler = Sampler(found.gpus, interval_s=0.02)
        sampler.start()
        sampler.mark("start")
        first = wait_for_reading(sampler, 300.0, 0)
        fgs.update_device(state, 0, current_limit_w=500.0)  # someone lifts the cap ...
        seen = wait_for_reading(sampler, 500.0, first)
        fgs.update_device(state, 0, current_limit_w=300.0)  # ... and puts it back
        wait_for_reading(sampler, 300.0, seen)
        sampler.mark("end")
        sampler.stop()
    finally:
        found.close()
    start, end = sampler.marks
    stats = window_stats(sampler.series(0, start.t, end.t))
    assert stats["power_limit_w_min"] == 300.0 and stats["power_limit_w_max"] == 500.0
    # At start and end the cap was in force: only the readings between show the excursion.
    check = enforced(doc_with(300.0, 300.0, 300.0, (stats["power_limit_w_min"], stats["power_limit_w_max"])))
    assert check["verdict"] == "fail" and check["value"] == 500.0
    assert "300-500 W in the window's readings" in check["note"]


def test_a_steady_cap_passes_with_the_window_checked():
    check = enforced(doc_with(300.0, 300.0, 300.0, (300.0, 300.0)))
    assert check["verdict"] == "pass" and "every reading" in check["threshold"]


def test_uncapped_run_on_capped_gpus_fails_and_names_the_holder():
    holder = "pid 4242, user alice, run r1, since 2026-01-01T00:00:00+0000"
    check = enforced(doc_with(None, 300.0, 300.0, (300.0, 300.0), held_by=holder))
    assert check["verdict"] == "fail" and check["value"] == 300.0
    assert "held by hpcai run: pid 4242, user alice" in check["note"]
    assert "not an uncapped figure" in check["note"]


def test_uncapped_run_capped_by_something_else_fails_too():
    check = enforced(doc_with(None, 700.0, 700.0, (450.0, 700.0)))
    assert check["verdict"] == "fail" and "set outside this run" in check["note"]


def test_uncapped_run_at_the_default_limit_passes():
    check = enforced(doc_with(None, 700.0, 700.0, (700.0, 700.0)))
    assert check["verdict"] == "pass"


def test_uncapped_without_a_launcher_block_is_not_applicable():
    doc = make_result(gpus=1, cap_w=None, power_per_gpu_w=280.0, window_s=60.0)
    doc.pop("launcher", None)
    assert enforced(doc)["verdict"] == "n/a"
