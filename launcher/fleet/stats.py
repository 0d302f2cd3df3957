"""Robust statistics over a fleet: median, MAD and the robust z-score.

The robust z-score is Iglewicz and Hoaglin's modified z-score,
0.6745 (x - median) / MAD, written here as (x - median) / (1.4826 MAD)
(1.4826 = 1 / 0.6745 makes the MAD a consistent estimate of the standard
deviation for normal data). They recommend |z| > 3.5 for an outlier
(Iglewicz & Hoaglin, "How to Detect and Handle Outliers", ASQC 1993).

Nominally identical GPUs often agree to the last digit on some metrics (a
clock, a cap-bound power): the MAD is then 0 and every difference would be
infinitely far out. A floor on the scale, a share of the median
(`min_spread`), says how small a difference is never worth a ticket.
"""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.measure.stats import median, quantile

# Iglewicz-Hoaglin's recommended cut-off for the modified z-score.
DEFAULT_THRESHOLD = 3.5
# 1 / Phi^-1(3/4): the MAD times this estimates the standard deviation.
MAD_TO_SIGMA = 1.4826
# Differences under this share of the median are never outliers.
DEFAULT_MIN_SPREAD = 0.01
# The fewest GPUs whose robust z can pass any threshold: with 2 the median is their mean
# and the MAD their half-difference, so each z is +-0.674 (1 / 1.4826) whatever the spread.
MIN_GPUS_TO_FLAG = 3


def mad(values: list[float], centre: float | None = None) -> float:
    """Median absolute deviation from the median (unscaled)."""
    centre = median(values) if centre is None else centre
    return median([abs(v - centre) for v in values])


@dataclass(frozen=True)
class Spread:
    """One metric at one cap over the fleet."""

    n: int
    median: float
    mad: float
    scale: float  # what a z-score divides by: 1.4826 MAD, at least min_spread x |median|
    robust_cv: float | None  # 1.4826 MAD / |median|: the spread itself, as a share
    p05: float
    p95: float
    minimum: float
    maximum: float

    def z(self, value: float) -> float:
        if self.scale == 0:
            return 0.0  # every value equal to a median of 0: nothing stands out
        return (value - self.median) / self.scale

    def to_dict(self) -> dict:
        return {"n": self.n, "median": self.median, "mad": self.mad, "scale": self.scale,
                "robust_cv": self.robust_cv, "p05": self.p05, "p95": self.p95,
                "min": self.minimum, "max": self.maximum}


def spread(values: list[float], min_spread: float = DEFAULT_MIN_SPREAD) -> Spread:
    ordered = sorted(values)
    centre = quantile(ordered, 0.5)
    deviation = mad(ordered, centre)
    sigma = MAD_TO_SIGMA * deviation
    return Spread(n=len(ordered), median=centre, mad=deviation,
                  scale=max(sigma, min_spread * abs(centre)),
                  robust_cv=sigma / abs(centre) if centre else None,
                  p05=quantile(ordered, 0.05), p95=quantile(ordered, 0.95),
                  minimum=ordered[0], maximum=ordered[-1])
