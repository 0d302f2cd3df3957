"""The sweep's slots (point and repeat) in an order that does not let heat
bias the result.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from hpcai.errors import UsageError
from hpcai.launcher.run.plan import clock_label
from hpcai.launcher.sweep.axes import MAX_SLOTS

ORDERS = ("shuffle", "alternate", "ascending")


@dataclass(frozen=True)
class Slot:
    cap_w: float | None
    repeat: int  # 0-based
    # Clock caps (--sm-clock/--mem-clock), MHz; None: the GPU's own clocks.
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    point: tuple = ()  # --vary: ((param, value), ...) (launcher/sweep/grid.py); () without
    profile: str | None = None  # --power-profile; None: the GPU's own

    def describe(self) -> str:
        cap = "uncapped" if self.cap_w is None else f"cap {self.cap_w:g} W"
        where = "".join(f"{name} {value}, " for name, value in self.point)
        clocks = clock_label(self.sm_clock_mhz, self.mem_clock_mhz)
        profile = f", profile {self.profile}" if self.profile else ""
        return f"{where}{cap}{', ' + clocks if clocks else ''}{profile}, repeat {self.repeat + 1}"


def point_of(sweep: dict) -> tuple:
    """A result's grid point, as its spec.sweep stores it ([[param, value], ...])."""
    return tuple((str(n), v) for n, v in (sweep.get("point") or []))


def _point_key(point):
    return tuple((v is None, v or 0.0) for v in point)


def schedule(caps: list[float | None], repeats: int, order: str, seed: int,
             sm_clocks: list[int | None] | None = None,
             mem_clocks: list[int | None] | None = None,
             points: list[tuple] | None = None,
             profiles: list[str | None] | None = None) -> list[Slot]:
    """Every cap (x SM clock x memory clock, at every --vary grid point) once per
    round, rounds one after another.

    shuffle: each round in its own random order from `seed`; alternate: low,
    high, next-low, next-high, ..., reversed every other round; ascending:
    low to high every round (heat builds up towards the high caps: biased).
    Without clocks the order is the one a caps-only sweep always had.
    """
    if order not in ORDERS:
        raise UsageError(f"unknown order {order!r}", f"choose one of: {', '.join(ORDERS)}")
    if repeats < 1:
        raise UsageError("--repeat must be at least 1", f"got {repeats}")
    settings = [(c, s, m, p) for c in caps for s in (sm_clocks or [None])
                for m in (mem_clocks or [None]) for p in (profiles or [None])]
    # Grid points outermost, so that a plain cap sweep's order is unchanged.
    combos = [(p, setting) for p in (points or [()])
              for setting in sorted(settings, key=_point_key)]
    if len(combos) * repeats > MAX_SLOTS:  # before any slot is made (--repeat 10**20)
        raise UsageError(f"the sweep has {len(combos) * repeats} runs ({len(combos)} setting(s) x "
                         f"--repeat {repeats})", f"use at most {MAX_SLOTS}")
    rng = random.Random(seed)
    slots: list[Slot] = []
    for r in range(repeats):
        if order == "shuffle":
            round_points = list(combos)
            rng.shuffle(round_points)
        elif order == "alternate":
            round_points = _low_high(combos)
            if r % 2:
                round_points.reverse()
        else:
            round_points = list(combos)
        slots.extend(Slot(c, r, s, m, point=p, profile=pr) for p, (c, s, m, pr) in round_points)
    if len(slots) > MAX_SLOTS:
        raise UsageError(f"the sweep has {len(slots)} runs", f"use at most {MAX_SLOTS}")
    return slots


def _low_high(caps: list) -> list:
    out, lo, hi = [], 0, len(caps) - 1
    while lo <= hi:
        out.append(caps[lo])
        if hi != lo:
            out.append(caps[hi])
        lo, hi = lo + 1, hi - 1
    return out


def new_seed() -> int:
    return random.SystemRandom().randrange(1, 2**31)


