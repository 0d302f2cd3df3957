"""The fleet's robust statistics against values worked out by hand."""
import pytest

from hpcai.launcher.fleet.stats import MAD_TO_SIGMA, mad, median, spread


def test_median_and_mad_by_hand():
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert median(values) == 3.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    # deviations from 3: 2, 1, 0, 1, 97 -> median 1
    assert mad(values) == 1.0


def test_robust_z_is_iglewicz_hoaglins_modified_z():
    values = [10.0, 11.0, 12.0, 13.0, 14.0, 40.0]
    s = spread(values, min_spread=0.0)
    # median 12.5, deviations 2.5 1.5 .5 .5 1.5 27.5 -> MAD 1.5
    assert s.median == 12.5 and s.mad == 1.5
    assert s.z(40.0) == pytest.approx(0.6745 * (40.0 - 12.5) / 1.5, rel=1e-3)
    assert s.robust_cv == pytest.approx(MAD_TO_SIGMA * 1.5 / 12.5)


def test_identical_gpus_do_not_make_every_difference_infinite():
    # Most GPUs at one clock: MAD 0. The floor (1% of the median) is the scale.
    s = spread([1980.0] * 7 + [1410.0], min_spread=0.01)
    assert s.mad == 0.0
    assert s.scale == pytest.approx(19.8)
    assert s.z(1410.0) == pytest.approx(-570.0 / 19.8)
    assert s.z(1980.0) == 0.0
    # A difference smaller than the floor stays within the threshold.
    assert abs(s.z(1950.0)) < 3.5
