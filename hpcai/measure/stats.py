"""Statistics over epochs and blocks, one rule for every caller: the result's
interval, the report's cells and the adaptive window's stopping rule all use
t95 below (Student's t, never the normal quantile in its place).
"""
from __future__ import annotations

import math
import statistics

# Two-sided 95% quantiles of Student's t (the 0.975 quantile), 1 to 30 degrees
# of freedom, to 3 decimals as published (NIST/SEMATECH e-Handbook of
# Statistical Methods, section 1.3.6.7.2, column 0.975).
T95_TABLE = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
             2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
             2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.959963984540054  # the normal 0.975 quantile: the limit for infinite dof


def t95(dof: int) -> float:
    """Two-sided 95% Student t quantile: the table to 30 degrees of freedom,
    then the Cornish-Fisher expansion in 1/dof (Abramowitz & Stegun 26.7.5),
    within 1e-7 of the exact quantile from 31 on:
    every value is exact to 3 decimals."""
    if dof < 1:
        raise ValueError(f"t95 needs at least 1 degree of freedom, not {dof}")
    if dof <= len(T95_TABLE):
        return T95_TABLE[dof - 1]
    z = Z975
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / dof + g2 / dof ** 2 + g3 / dof ** 3 + g4 / dof ** 4


def stdev(values: list[float], mean: float | None = None) -> float:
    """Sample standard deviation (two or more values), two passes with exactly rounded
    sums (math.fsum) and the compensation term of Chan, Golub & LeVeque's corrected
    two-pass algorithm (the rounding of the mean): within a few units in the last
    place of statistics.stdev, which works in Fractions and costs far more (a fleet's
    report describes hundreds of thousands of cells)."""
    n = len(values)
    if mean is None:
        mean = math.fsum(values) / n  # statistics.fmean exactly
    deviations = [v - mean for v in values]
    drift = math.fsum(deviations)
    squares = math.fsum([d * d for d in deviations]) - drift * drift / n
    return math.sqrt(max(squares, 0.0) / (n - 1))


def throughput_stats(values: list[float]) -> dict:
    """Mean, standard deviation and a 95% confidence interval (Student's t) over epochs."""
    n = len(values)
    mean = statistics.fmean(values) if values else None
    std = stdev(values, mean) if n > 1 else None
    half = None
    if std is not None:
        half = t95(n - 1) * std / math.sqrt(n)
    return {
        "epochs": n,
        "mean": mean,
        "std": std,
        "ci95": [mean - half, mean + half] if half is not None else None,
        "cv": std / mean if std is not None and mean else None,
    }


def relative_half_width(values: list[float]) -> float | None:
    """95% confidence half-width of the mean, over the mean; None below 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    if mean == 0:
        return None
    return t95(len(values) - 1) * stdev(values, mean) / math.sqrt(len(values)) / abs(mean)


def mean_of_known(values) -> float | None:
    """The mean of the values that are known (None: not measured, left out), exactly
    rounded (statistics.fmean); None when none is known."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def median(values: list[float]) -> float:
    """The middle value, or the mean of the middle two; ValueError for none."""
    return statistics.median(values)  # StatisticsError is a ValueError


def quantile(values: list[float], q: float) -> float:
    """The q quantile (0 <= q <= 1), linear between the closest ranks (numpy's
    default), without numpy."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: list[float]) -> dict | None:
    """Mean, median, 95th percentile and maximum of the known values."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "mean": statistics.fmean(values),
        "median": median(values),
        "p95": quantile(values, 0.95),
        "max": max(values),
    }
