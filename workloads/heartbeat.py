"""The workload's step progress, for the launcher's stall watchdog
(launcher/run/stall.py): every rank touches one file in the run folder as its
steps complete, at most once a second.

One file for all ranks, not one each: the ranks of a data-parallel run meet
in a collective at every step, so one hung rank stops them all; an engine
that drives its own loop (LitGPT, SGLang) beats from rank 0's epoch report.
The launcher made the file; a rank only sets its time (no write, no create).
"""
from __future__ import annotations

import os
import time

PROGRESS_ENV = "HPCAI_PROGRESS"
EVERY_S = 1.0  # a step can take microseconds: one utime a second is enough

_last = float("-inf")


def beat() -> None:
    """A step (or an epoch) completed."""
    global _last
    path = os.environ.get(PROGRESS_ENV)
    if not path:
        return
    now = time.monotonic()
    if now - _last < EVERY_S:
        return
    _last = now
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:  # the folder went away or filled up: the run itself will say so
        pass
