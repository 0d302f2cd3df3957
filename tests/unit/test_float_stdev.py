"""The statistics in floats (hpcai.measure.stats: the result's and the report's
cells') equal the exact ones (statistics.stdev, in Fractions) to a relative 1e-12,
also where the spread is tiny beside the mean (cancellation)."""
from __future__ import annotations

import math
import random
import statistics

import pytest

from hpcai.launcher.report.stats import describe
from hpcai.measure.stats import relative_half_width, t95, throughput_stats


def _lists():
    rng = random.Random(26)
    yield [10.0, 12.0, 14.0]
    yield [3.0, 3.0, 3.0, 3.0]  # no spread: std exactly 0
    yield [1e9 + 1e-3 * k for k in (1, 2, 4, 7)]  # spread 1e-12 of the mean
    for _ in range(300):
        n = rng.randint(2, 40)
        centre, spread = 10 ** rng.uniform(-3, 9), 10 ** rng.uniform(-9, 0)
        yield [centre * (1 + spread * rng.gauss(0, 1)) for _ in range(n)]


def _close(ours, exact):
    return ours == exact or abs(ours - exact) <= 1e-12 * abs(exact)


@pytest.mark.parametrize("values", list(_lists()))
def test_float_statistics_equal_the_exact_ones(values):
    ours, exact_std = throughput_stats(values), statistics.stdev(values)
    n, mean = len(values), statistics.fmean(values)
    half = t95(n - 1) * exact_std / math.sqrt(n)
    assert ours["epochs"] == n and ours["mean"] == mean
    assert _close(ours["std"], exact_std)
    for mine, theirs in zip(ours["ci95"], (mean - half, mean + half)):
        assert _close(mine, theirs)
    assert (ours["cv"] is None) == (mean == 0)
    if mean:
        assert _close(ours["cv"], exact_std / mean)
        assert _close(relative_half_width(values), half / abs(mean))
    # The report's cells describe their runs with the same rule.
    cell = describe(values)
    assert (cell.n, cell.mean, cell.std, cell.cv) == (n, ours["mean"], ours["std"], ours["cv"])


def test_one_value_and_none_have_no_spread():
    one, none = describe([5.0, None]), describe([None])
    assert (one.n, one.mean, one.std, one.ci95, one.cv) == (1, 5.0, None, None, None)
    assert (none.n, none.mean, none.std, none.ci95, none.cv) == (0, None, None, None, None)
