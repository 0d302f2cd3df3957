"""What a test of a measured run may demand of its exit status (issue 41, item 11).

A run measured on a loaded machine can rightly fail the checks that judge the
machine's steadiness: its epochs spread (throughput_cv), one epoch stalls
(slow_epoch), the sampler falls behind (sample_interval, sample_coverage). The
launcher then exits 3: the measurement complete, the result kept but judged
invalid. A test about what a run records must accept that, and nothing else:
any other failed check, or any other exit status, still fails the test.
"""
from __future__ import annotations

import re

# The validity checks (hpcai/measure/validity.py) a busy machine can fail on its own.
LOAD_DEPENDENT_CHECKS = frozenset({"throughput_cv", "slow_epoch", "sample_interval", "sample_coverage"})
INVALID_EXIT = 3  # hpcai/errors.py: complete, but a validity check failed
FAILED = re.compile(r"failed validity check\(s\): ([a-z_]+(?:, [a-z_]+)*)")


def failed_under_load(done) -> set[str]:
    """The checks the run failed ({} for exit 0), asserting each is load-dependent."""
    if done.returncode == 0:
        return set()
    assert done.returncode == INVALID_EXIT, f"exit {done.returncode}: {done.stderr[-3000:]}"
    named = {name for found in FAILED.findall(done.stderr) for name in found.split(", ")}
    assert named, f"exit 3 without a failed validity check named: {done.stderr[-3000:]}"
    assert named <= LOAD_DEPENDENT_CHECKS, f"failed {sorted(named - LOAD_DEPENDENT_CHECKS)}: {done.stderr[-3000:]}"
    return named


def assert_measured(done) -> set[str]:
    """The run measured every cap: exit 0, or exit 3 for load-dependent checks only."""
    return failed_under_load(done)


def finished(statuses: list[str], failed: set[str]) -> bool:
    """Every run complete, or 'invalid' where the launcher named load-dependent failures."""
    return set(statuses) <= ({"complete", "invalid"} if failed else {"complete"})
