"""Energy efficiency, in one place: the result (workloads/result.py), the
Slurm aggregate and the report all compute it here, so they cannot disagree.

Units of work per joule; with a node overhead, the GPUs' energy plus the
overhead (W per node) over the measured window. An overhead of 0 W is a
real value (the site counts GPUs only), not a missing one.
"""
from __future__ import annotations


def units_per_joule(units: float | None, energy_j: float | None, overhead_w: float = 0.0,
                    window_s: float | None = None) -> float | None:
    """None when there is no work or no energy to divide, or an overhead without a window."""
    total = energy_with_overhead_j(energy_j, overhead_w, window_s)
    if not units or not total or total <= 0:
        return None
    return units / total


def energy_with_overhead_j(energy_j: float | None, overhead_w: float | None,
                           window_s: float | None) -> float | None:
    if energy_j is None:
        return None
    if not overhead_w:
        return energy_j
    if window_s is None:
        return None
    return energy_j + overhead_w * window_s
