"""Settled and adaptive measurement windows: the pure statistics, no I/O.

Settle: after a cap change the GPU's temperature and power drift for a while
(Zeus's "thermally stable profiling"; the seed paper sleeps 600 s instead).
The window opens when the least-squares slope over the last `settle_window_s`
of both is below a threshold, or after `settle_max_s` whatever the drift.

Adaptive stopping: the window is measured in blocks, each at least one sensor
update period long (NVML's power reading is a 1 s average on H100/H200), so
block means are close to independent (the batch-means method). Measuring stops
when the 95% confidence half-width of the mean block throughput and of the
mean energy per unit, each relative to its mean, is within the target; never
before the minimum window (seconds and power samples), never after the maximum.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from hpcai.measure.stats import relative_half_width

# The protocol's measurement settings, where a preset or the command line sets
# none. 30 s and 30 samples: ML.ENERGY's validator asks for >= 30 s of steady
# state; a 1 s block covers one update of NVML's 1 s power average.
WINDOW_DEFAULTS = {
    "ci_target": None,  # None: the fixed protocol (warm-up epochs, measured epochs)
    "min_window_s": 30.0,
    "min_window_samples": 30,
    "max_window_s": 600.0,
    "block_s": 1.0,
    "settle_window_s": 10.0,
    "settle_max_s": 120.0,
    "settle_temperature_c": 0.5,  # slope over settle_window_s, degrees C
    "settle_power_frac": 0.01,  # slope over settle_window_s, share of mean power
}
SWEEP_CI_TARGET = 0.02  # sweeps measure adaptively unless told otherwise
MIN_BLOCKS = 3  # a half-width from fewer blocks is no estimate


def check_preset_windows(windows: Mapping) -> str | None:
    """What is wrong with a preset's declared windows (workloads/declaration.py's
    Preset.windows), or None: only WINDOW_DEFAULTS' settings, as positive numbers."""
    for key, value in windows.items():
        if key not in WINDOW_DEFAULTS or key == "ci_target":
            return f"windows: {key!r} is no window setting"
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            return f"windows: {key} = {value!r} is not a positive number"
    return None


def window_settings(protocol: dict, windows: Mapping) -> dict:
    """The protocol with every window setting filled: given ones, then the
    preset's declared windows, then the defaults."""
    return {**WINDOW_DEFAULTS, **windows, **{k: v for k, v in protocol.items() if v is not None}}


def resolve_protocol(protocol: dict, windows: Mapping, in_run: bool = False) -> dict:
    """The run spec's protocol: window settings (the preset's `windows` over the
    defaults) filled in where an adaptive window (a ci_target) or an in-run sweep
    uses them; "off" becomes no ci_target. A plain fixed-protocol run keeps its
    protocol as it was."""
    out = dict(protocol)
    if out.get("ci_target") == "off":
        out["ci_target"] = None
    if out.get("ci_target") is not None or in_run:
        out = window_settings(out, windows)
    else:
        for key in WINDOW_DEFAULTS:
            if out.get(key) is None:
                out.pop(key, None)
    return out


def check_window_settings(protocol: dict) -> str | None:
    """What is wrong with the window settings, as `what: what to do`, or None."""
    target = protocol.get("ci_target")
    if target is not None and not 0 < float(target) < 1:
        return (f"--ci-target {target:g} must lie between 0 and 1 (a share of the mean): "
                "e.g. --ci-target 0.01 for a 1% half-width")
    lo, hi = protocol.get("min_window_s"), protocol.get("max_window_s")
    if lo is not None and hi is not None and float(hi) < float(lo):
        return (f"--max-window-s {hi:g} is shorter than --min-window-s {lo:g}: "
                "give a maximum at least as long as the minimum")
    return None


@dataclass
class Block:
    units: float
    seconds: float
    energy_j: float | None  # over the block, every measured GPU; None: not measured

    @property
    def throughput(self) -> float:
        return self.units / self.seconds if self.seconds > 0 else 0.0


@dataclass
class StopRule:
    target: float | None  # relative half-width; None: never stop on precision
    min_s: float
    min_samples: int
    max_s: float

    def half_widths(self, blocks: list[Block]) -> dict:
        tp = relative_half_width([b.throughput for b in blocks])
        energies = [b.energy_j / b.units for b in blocks if b.energy_j is not None and b.units]
        epu = relative_half_width(energies) if len(energies) == len(blocks) else None
        return {"throughput_frac": tp, "energy_per_unit_frac": epu}

    def decide(self, blocks: list[Block], samples: int) -> str | None:
        """Why to stop now ("target", "max_window"), or None to measure on."""
        elapsed = sum(b.seconds for b in blocks)
        if elapsed >= self.max_s:
            return "max_window"
        if self.target is None or elapsed < self.min_s or samples < self.min_samples \
                or len(blocks) < MIN_BLOCKS:
            return None
        widths = self.half_widths(blocks)
        energy_known = all(b.energy_j is not None for b in blocks)
        if widths["throughput_frac"] is None or widths["throughput_frac"] > self.target:
            return None
        if energy_known and (widths["energy_per_unit_frac"] is None
                             or widths["energy_per_unit_frac"] > self.target):
            return None
        return "target"


def slope_over(points: list[tuple[float, float]], window_s: float) -> float | None:
    """Least-squares slope of the points in the last window_s, times window_s
    (the change over the window); None with fewer than 3 points."""
    fit = _trend(points, window_s)
    return fit[0] if fit else None


def _trend(points: list[tuple[float, float]], window_s: float) -> tuple[float, float] | None:
    """(change over the window, its standard error) from the least-squares fit of
    the points in the last window_s; None with fewer than 3 points."""
    if not points:
        return None
    end = points[-1][0]
    recent = [(t, v) for t, v in points if t >= end - window_s]
    if len(recent) < 3:
        return None
    mt = statistics.fmean(t for t, _ in recent)
    mv = statistics.fmean(v for _, v in recent)
    den = sum((t - mt) ** 2 for t, _ in recent)
    if den == 0:
        return None
    slope = sum((t - mt) * (v - mv) for t, v in recent) / den
    residual = sum((v - mv - slope * (t - mt)) ** 2 for t, v in recent) / (len(recent) - 2)
    return slope * window_s, math.sqrt(residual / den) * window_s


def drift(power: list[tuple[float, float]], temperature: list[tuple[float, float]],
          window_s: float) -> dict:
    """Drift over the last window: temperature in degrees C, power as a share of its
    mean with its fit's standard error (`power_frac_se`): an H100's instant power
    swings by +-20% from one 100 ms reading to the next at a steady load (the GPU
    kit, 2026-11-28), so a power slope is a drift only where it stands out of that.
    Temperature is smooth (a 1 degree C sensor): its slope is read as it is."""
    end = power[-1][0] if power else 0.0
    recent = [v for t, v in power if t >= end - window_s]
    mean = statistics.fmean(recent) if recent else None
    power_fit = _trend(power, window_s)
    return {"temperature_c": slope_over(temperature, window_s),
            "power_frac": power_fit[0] / mean if power_fit and mean else None,
            "power_frac_se": power_fit[1] / mean if power_fit and mean else None}


# A fitted drift this many standard errors from zero is a trend, not noise.
SIGNIFICANT_SE = 2.0


def significant_drift(found: dict, key: str) -> float | None:
    """How far the drift `key` stands out of its fit's noise (|drift| less
    SIGNIFICANT_SE standard errors, at least 0); the drift itself where the record
    has no standard error (older results); None where unknown."""
    value = found.get(key)
    if value is None:
        return None
    se = found.get(f"{key}_se")
    return abs(value) if se is None else max(0.0, abs(value) - SIGNIFICANT_SE * se)


def is_settled(found: dict, protocol: dict) -> bool:
    """Both drifts known and below their thresholds, power beyond its fit's noise
    (temperature may be unknown: a source without a sensor)."""
    power = significant_drift(found, "power_frac")
    if power is None or power > float(protocol["settle_power_frac"]):
        return False
    temp = found.get("temperature_c")
    return temp is None or abs(temp) <= float(protocol["settle_temperature_c"])
