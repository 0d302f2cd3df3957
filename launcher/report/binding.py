"""Where did the caps stop binding? From each result's power.cap_binding
(hpcai/measure/cap_binding.py): a cap the GPU never reached did not change
what the GPU did, so any energy it "saved" is noise, and it is never
recommended as a saving; the workload is pointed at the clock knob instead.
"""
from __future__ import annotations

from hpcai.launcher.report.stats import Cell

CLOCK_HINT = ("a power cap above what the work draws changes nothing; cap the SM clock instead "
              "(`hpcai-launch WORKLOAD --sm-clock 1005,1410,1980`, a clock sweep) to trade speed "
              "for energy")


def cell_binds(cell: Cell) -> bool | None:
    """True if any run of the cell bound, False if every run said it did not,
    None where no run could tell (older results, no throttle or limit read)."""
    flags = [(r.power_doc.get("cap_binding") or {}).get("binds") for r in cell.runs]
    if True in flags:
        return True
    return False if flags and all(f is False for f in flags) else None


def drawn(cell: Cell) -> tuple[float | None, float | None]:
    """The lowest and highest power drawn (W, per GPU) over the cell's runs."""
    lows, highs = [], []
    for run in cell.runs:
        got = (run.power_doc.get("cap_binding") or {}).get("power_drawn_w") or {}
        if got.get("min") is not None:
            lows.append(got["min"])
        if got.get("max") is not None:
            highs.append(got["max"])
    return (min(lows) if lows else None, max(highs) if highs else None)


def unbound(cells: list[Cell]) -> list[Cell]:
    """Capped cells whose cap did not bind."""
    return [c for c in cells if c.cap_w is not None and cell_binds(c) is False]


def drop_unbound(a) -> None:
    """Keep non-binding caps out of the ranking, except the highest one: it is
    the baseline (the GPU ran as if uncapped), so nothing below it that also
    did not bind can have saved energy."""
    loose = unbound(a.candidates)
    if not loose:
        return
    baseline = max(loose, key=lambda c: c.cap_w)
    has_uncapped = any(c.cap_w is None for c in a.candidates)
    dropped = [c for c in loose if has_uncapped or c is not baseline]
    if dropped:
        a.candidates = [c for c in a.candidates if not any(c is d for d in dropped)]
        a.notes.append(f"did not bind, so not recommended: {', '.join(c.cap_label for c in dropped)}"
                       f" ({summary(loose)}); {CLOCK_HINT}")


def summary(loose: list[Cell]) -> str:
    """"at or above 300 W the GPU never reached the cap: 137-290 W drawn"."""
    lowest = min(c.cap_w for c in loose)
    lows = [drawn(c)[0] for c in loose if drawn(c)[0] is not None]
    highs = [drawn(c)[1] for c in loose if drawn(c)[1] is not None]
    span = f": {min(lows):.0f}-{max(highs):.0f} W drawn" if lows and highs else ""
    return f"at or above {lowest:g} W the GPU never reached the cap{span}"
