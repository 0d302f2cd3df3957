"""The sweep's axes as typed: caps (`--cap 250,300` or a range) and clocks
(`--sm-clock`), each list at most MAX_SLOTS long.
"""
from __future__ import annotations

import math

from hpcai.errors import UsageError

MAX_SLOTS = 200  # a typo in a range should not start a week of runs


def parse_caps(text: str) -> list[float]:
    """"300", "200,300,400", "200:700:100" (stop included) or a mix, as sorted watts."""
    caps: list[float] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise UsageError(f"{text!r} has an empty entry", "example: --cap 200,300,400")
        if ":" in item:
            caps.extend(_parse_range(item))
        else:
            caps.append(_watts(item))
    unique = sorted(set(caps))
    if len(unique) > MAX_SLOTS:
        raise UsageError(f"{text!r} gives {len(unique)} caps", f"use at most {MAX_SLOTS}")
    return unique


def _watts(text: str) -> float:
    raw = text.strip().lower().removesuffix("w").strip()
    try:
        number = float(raw)
    except ValueError:
        raise UsageError(f"{text!r} is not a number of watts",
                         "example: --cap 300, --cap 200,300,400 or --cap 200:700:100") from None
    if not math.isfinite(number) or number <= 0:
        raise UsageError(f"{text!r} must be a positive number of watts", "example: --cap 300")
    return number


def _parse_range(text: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != 3:
        raise UsageError(f"range {text!r} needs START:STOP:STEP", "example: --cap 200:700:100")
    start, stop, step = (_watts(p) for p in parts)
    if stop < start:
        raise UsageError(f"range {text!r} ends below its start", "example: --cap 200:700:100")
    steps = (stop - start) / step  # a tiny step (1e-320) gives inf: refused, not counted
    if not math.isfinite(steps) or steps + 1 > MAX_SLOTS:
        raise UsageError(f"range {text!r} gives more than {MAX_SLOTS} caps", "use a larger step")
    count = math.floor(steps + 1e-9) + 1
    return [round(start + i * step, 6) for i in range(count)]


def parse_clocks(text: str, flag: str = "--sm-clock") -> list[int]:
    """"1410", "1005,1410,1980", "1005:1980:165" (stop included) or a mix, as
    sorted whole MHz; each is checked against the GPUs' supported clocks later."""
    example = f"example: {flag} 1410, {flag} 1005,1410,1980 or {flag} 1005:1980:165"
    clocks: list[int] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise UsageError(f"{flag} {text!r} has an empty entry", example)
        parts = item.split(":")
        if len(parts) not in (1, 3):
            raise UsageError(f"{flag} range {item!r} needs START:STOP:STEP", example)
        values = [_mhz(p, flag, example) for p in parts]
        if len(values) == 1:
            clocks.append(values[0])
            continue
        start, stop, step = values
        if stop < start:
            raise UsageError(f"{flag} range {item!r} ends below its start", example)
        count = (stop - start) // step + 1
        if count > MAX_SLOTS:
            raise UsageError(f"{flag} range {item!r} gives {count} clocks", "use a larger step")
        clocks.extend(start + i * step for i in range(count))
    unique = sorted(set(clocks))
    if len(unique) > MAX_SLOTS:
        raise UsageError(f"{flag} {text!r} gives {len(unique)} clocks", f"use at most {MAX_SLOTS}")
    return unique


def _mhz(text: str, flag: str, example: str) -> int:
    raw = text.strip().lower().removesuffix("mhz").strip()
    try:
        number = float(raw)
    except ValueError:
        raise UsageError(f"{flag} {text.strip()!r} is not a clock in MHz", example) from None
    if not math.isfinite(number) or number <= 0 or number != int(number):
        raise UsageError(f"{flag} {text.strip()!r} must be a positive whole number of MHz", example)
    return int(number)


