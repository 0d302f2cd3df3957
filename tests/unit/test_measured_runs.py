"""The rule for tests of measured runs (tests/measured_runs.py, issue 41 item 11):
exit 3 is accepted only for the checks a loaded machine can fail."""
from subprocess import CompletedProcess

import pytest

from measured_runs import LOAD_DEPENDENT_CHECKS, assert_measured, finished
from hpcai.measure import validity


def _done(code: int, stderr: str = "") -> CompletedProcess:
    return CompletedProcess([], code, "", stderr)


def test_a_clean_run_and_a_run_that_failed_throughput_cv_under_load_pass():
    assert assert_measured(_done(0)) == set()
    line = "hpcai: in-run segment 2: cap 300 W invalid (failed validity check(s): throughput_cv, slow_epoch)\n"
    assert assert_measured(_done(3, line)) == {"throughput_cv", "slow_epoch"}


@pytest.mark.parametrize("code,stderr", [
    (3, "segment 1: cap 200 W invalid (failed validity check(s): power_range)\n"),  # not the load's doing
    (3, "segment 1: invalid (failed validity check(s): throughput_cv, enforced_limit)\n"),
    (3, "no check named\n"),
    (1, "hpcai-launch: error: something broke\n"),
    (2, "hpcai-launch: error: bad option\n"),
])
def test_anything_else_fails_the_test(code, stderr):
    with pytest.raises(AssertionError):
        assert_measured(_done(code, stderr))


def test_the_load_dependent_checks_are_checks_validity_makes():
    source = open(validity.__file__).read()
    assert all(f'check("{name}"' in source for name in LOAD_DEPENDENT_CHECKS)


def test_finished_allows_invalid_runs_only_when_load_dependent_checks_failed():
    assert finished(["complete", "complete"], set())
    assert not finished(["complete", "invalid"], set())
    assert finished(["complete", "invalid"], {"throughput_cv"})
    assert not finished(["complete", "failed"], {"throughput_cv"})
