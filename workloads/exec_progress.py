"""Work counted from a command's output (`--progress-regex`) and from the
hpcai.measure API's event file, turned into the harness's epochs.

Pure functions of (time stamp, text) pairs, so they are tested without a
process. A regex names what it captures by its group:

- `units`: units done since the previous matching line;
- `total`: units done so far (the difference between lines counts);
- `rate`: units per second at that line (times the interval since the previous line).

Each matching line closes an interval at the time the line arrived. The first
interval (from the command's start) holds start-up, so it is warm-up, and so
are the next `warmup_epochs` - 1 ones when more are asked for.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from hpcai.errors import UsageError
from hpcai.workloads.protocol import Epoch

GROUPS = ("units", "total", "rate")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def compile_regex(text: str) -> re.Pattern:
    """The pattern, or a UsageError naming what is wrong with it."""
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise UsageError(f"--progress-regex {text!r} is not a valid regular expression ({exc})",
                         "fix it, e.g. --progress-regex 'step (?P<total>\\d+)'") from None
    if not any(g in pattern.groupindex for g in GROUPS):
        raise UsageError(f"--progress-regex {text!r} has no group naming what it counts",
                         "name one (?P<units>...) for units since the last line, (?P<total>...) "
                         "for units so far, or (?P<rate>...) for units per second")
    return pattern


@dataclass
class Reading:
    """One matching line: when it arrived and what it said."""

    time: float
    kind: str  # a key of GROUPS
    value: float


def read_line(pattern: re.Pattern, line: str, at: float) -> Reading | None:
    match = pattern.search(line)
    if match is None:
        return None
    for kind in GROUPS:
        if kind in pattern.groupindex and match.group(kind) is not None:
            text = match.group(kind).replace(",", "").replace("_", "")
            number = _NUMBER.fullmatch(text.strip())
            if number is None:
                return None  # the group caught something other than a number
            return Reading(at, kind, float(text))
    return None


def epochs_from_readings(readings: list[Reading], started: float,
                         warmup_epochs: int) -> list[Epoch]:
    """One epoch per interval between matching lines (the first from `started`)."""
    epochs, previous_time, previous_total = [], started, 0.0
    warm = max(1, int(warmup_epochs))
    for index, reading in enumerate(readings):
        seconds = max(0.0, reading.time - previous_time)
        if reading.kind == "units":
            units = reading.value
        elif reading.kind == "total":
            units = reading.value - previous_total
            previous_total = reading.value
        else:
            units = reading.value * seconds
        epochs.append(Epoch(index, index < warm, 1, max(0, round(units)), previous_time,
                            reading.time, seconds, None))
        previous_time = reading.time
    return epochs


# ---- the API's events (hpcai/measure/api.py writes them, one JSON object a line) ----
def unit_from_events(lines: list[str]) -> str | None:
    """The unit the program named (hpcai.measure.window(unit=...)), if any."""
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("unit"):
            return str(event["unit"])
    return None


def epochs_from_events(lines: list[str]) -> tuple[list[Epoch], dict]:
    """Closed windows as epochs (warm-up ones flagged), and per window name the
    totals {name: {"windows", "units", "seconds"}}. A torn last line is ignored."""
    epochs: list[Epoch] = []
    names: dict[str, dict] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("event") != "window":
            continue
        epoch = epoch_from_event(event, len(epochs))
        start, end, units = epoch.start, epoch.end, epoch.units
        epochs.append(epoch)
        entry = names.setdefault(str(event.get("name")), {"windows": 0, "units": 0, "seconds": 0.0})
        entry["windows"] += 1
        entry["units"] += units
        entry["seconds"] += max(0.0, end - start)
    return epochs, names


def epoch_from_event(event: dict, index: int, warmup: bool | None = None) -> Epoch:
    """One closed window as epoch `index` (warmup: override the window's own flag)."""
    start, end = float(event["start"]), float(event["end"])
    units = max(0, round(float(event.get("units") or 0)))
    flag = bool(event.get("warmup")) if warmup is None else warmup
    return Epoch(index, flag, max(1, int(event.get("steps") or 1)), units, start, end,
                 max(0.0, end - start), event.get("loss"))
