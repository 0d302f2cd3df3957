"""The one way hpcai writes a moment: UTC, ISO 8601, to the millisecond.

Results, sweeps, jobs, fleet campaigns and reports all stamp with it, so two
records of one node sort and compare as written (and a run shorter than a
second still has a start before its end).
"""
from __future__ import annotations

from datetime import datetime, timezone


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
