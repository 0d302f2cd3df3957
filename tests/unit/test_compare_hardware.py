"""`results compare` on two GPUs (issue 41, item 7): the same workload, settings,
protocol and cap on H100 and MI300X is "different hardware", not "not comparable",
and comes with the ratios B / A of throughput per GPU and units per joule, each
with its 95% interval, and what differs."""
from __future__ import annotations

import json
import math
import subprocess

import pytest

from conftest import LAUNCHER, ROOT
from hpcai.launcher.bundles.compare import HARDWARE, NOT_COMPARABLE, compare
from hpcai.launcher.bundles.hardware import ratio
from hpcai.launcher.bundles.recompute import recompute
from hpcai.measure.stats import relative_half_width
from report_docs import make_result, write_result

H100 = {"gpu": "NVIDIA H100 80GB HBM3", "vendor": "nvidia"}
MI300X = {"gpu": "AMD Instinct MI300X", "vendor": "amd"}


def _run(board: dict, epochs: list[float], power: float, **kw) -> dict:
    doc = make_result(**board, gpus=2, epochs=epochs, per_gpu=sum(epochs) / len(epochs), power_per_gpu_w=power,
                      window_s=60.0, **{"cap_w": 300.0, **kw})
    cap = doc["spec"]["power"]["cap_w"]  # the launcher read each limit back: the cap held
    doc["launcher"]["gpu_limits"] = [{"index": i, "requested_w": cap, "enforced_at_start_w": cap,
                                      "enforced_at_end_w": cap} for i in range(2)]
    return doc


def _pair(**kw):
    a = _run(H100, [1000.0, 1010.0, 990.0], 280.0)
    b = _run(MI300X, [1200.0, 1190.0, 1215.0], 290.0, **kw)
    return a, b, compare(a, b, recompute(a, None), recompute(b, None))


def test_two_gpus_at_one_cap_are_different_hardware_with_ratios_and_intervals():
    a, b, found = _pair()
    assert found["verdict"] == HARDWARE
    assert {"grade": HARDWARE, "reason": "GPU H100 SXM vs MI300X"} in found["reasons"]
    assert all(r["grade"] != NOT_COMPARABLE for r in found["reasons"])
    tp = found["ratios"]["throughput_per_gpu"]
    assert tp["ratio"] == pytest.approx(b["throughput"]["per_gpu"] / a["throughput"]["per_gpu"])
    h = math.hypot(relative_half_width(a["throughput"]["per_epoch_node"]),
                   relative_half_width(b["throughput"]["per_epoch_node"]))
    assert tp["interval"] == pytest.approx([tp["ratio"] * (1 - h), tp["ratio"] * (1 + h)])
    assert tp["interval"][0] < tp["ratio"] < tp["interval"][1]
    upj = found["ratios"]["units_per_joule"]
    assert upj["ratio"] == pytest.approx(b["power"]["units_per_joule"] / a["power"]["units_per_joule"])
    assert upj["interval"] is None  # one energy window each: no spread to give an interval
    assert found["ratios"]["cap_w"] == 300.0


def test_the_energy_interval_comes_from_adaptive_windows():
    assert ratio((2.0, 0.03), (3.0, 0.04))["interval"] == pytest.approx([1.5 * 0.95, 1.5 * 1.05])
    assert ratio((None, None), (3.0, 0.04)) is None


def test_another_cap_or_setting_is_still_not_comparable_and_has_no_ratios():
    *_, found = _pair(cap_w=250.0)
    assert found["verdict"] == NOT_COMPARABLE and "ratios" not in found
    assert {"grade": NOT_COMPARABLE, "reason": "cap 300.0 W vs 250.0 W"} in found["reasons"]


def test_the_cli_prints_the_ratios_and_exits_0(tmp_path):
    a, b, _ = _pair()
    paths = [write_result(tmp_path / name, doc) for name, doc in (("a", a), ("b", b))]
    done = subprocess.run([*LAUNCHER, "results", "compare", *map(str, paths)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": DIFFERENT HARDWARE" in done.stdout and "different hardware: GPU H100 SXM vs MI300X" in done.stdout
    assert "B / A at 300 W:" in done.stdout
    assert "throughput per GPU: 1.202 (1202 vs 1000; 95% interval " in done.stdout
    assert "units per joule: " in done.stdout and "no interval: a run measured it as one window" in done.stdout
    as_json = subprocess.run([*LAUNCHER, "results", "compare", *map(str, paths), "--json"], capture_output=True,
                             text=True, cwd=ROOT, timeout=120)
    (pair,) = json.loads(as_json.stdout)
    assert pair["verdict"] == HARDWARE and pair["ratios"]["throughput_per_gpu"]["interval"]
