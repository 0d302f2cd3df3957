"""Work counted from a command's output and from hpcai.measure's events
(workloads/exec_progress.py), and the exec command line's checks
(launcher/cli/exec_cli.py), without running anything."""
import json

import pytest

from hpcai.errors import UsageError
from hpcai.launcher.cli.exec_cli import exec_params
from hpcai.workloads.catalog import get_workload
from hpcai.workloads.exec_progress import (compile_regex, epochs_from_events, epochs_from_readings,
                                           read_line, unit_from_events)

EXEC = get_workload("exec")


def readings(pattern: str, lines: list[tuple[float, str]]):
    compiled = compile_regex(pattern)
    return [r for r in (read_line(compiled, text, at) for at, text in lines) if r is not None]


def test_a_units_group_counts_units_since_the_previous_line():
    found = readings(r"done (?P<units>\d+) samples", [
        (10.0, "loading"), (12.0, "done 64 samples"), (13.0, "noise"), (14.0, "done 64 samples"),
        (15.0, "done 32 samples")])
    epochs = epochs_from_readings(found, started=9.0, warmup_epochs=0)
    assert [(e.start, e.end, e.units, e.warmup) for e in epochs] == [
        (9.0, 12.0, 64, True), (12.0, 14.0, 64, False), (14.0, 15.0, 32, False)]
    assert epochs[1].throughput == 32.0


def test_a_total_group_counts_the_difference_and_commas_are_read():
    found = readings(r"tokens so far: (?P<total>[\d,]+)", [
        (1.0, "tokens so far: 1,000"), (2.0, "tokens so far: 3,000"), (4.0, "tokens so far: 7,000")])
    epochs = epochs_from_readings(found, started=0.0, warmup_epochs=2)
    assert [e.units for e in epochs] == [1000, 2000, 4000]
    assert [e.warmup for e in epochs] == [True, True, False]


def test_a_rate_group_is_units_per_second_over_the_interval():
    found = readings(r"(?P<rate>[\d.]+) tok/s", [(0.5, "100.0 tok/s"), (2.5, "250.5 tok/s")])
    epochs = epochs_from_readings(found, started=0.0, warmup_epochs=0)
    assert [e.units for e in epochs] == [50, 501]
    assert epochs[1].throughput == pytest.approx(250.5, rel=1e-3)


def test_a_group_catching_no_number_is_no_reading():
    assert readings(r"step (?P<units>\S+)", [(1.0, "step many")]) == []


@pytest.mark.parametrize("pattern, fragment", [
    (r"step \d+", "has no group naming what it counts"),
    (r"(?P<steps>\d+)", "has no group naming what it counts"),
    (r"(?P<units>\d+", "is not a valid regular expression"),
])
def test_a_regex_without_a_counting_group_is_refused(pattern, fragment):
    with pytest.raises(UsageError, match=fragment):
        compile_regex(pattern)


def test_events_become_epochs_and_a_torn_last_line_is_ignored():
    lines = [json.dumps({"event": "window", "name": "warm", "warmup": True, "start": 1.0, "end": 2.0,
                         "units": 10, "steps": 1, "unit": "cells"}),
             json.dumps({"event": "window", "name": "solve", "warmup": False, "start": 2.0, "end": 4.0,
                         "units": 200.4, "steps": 5, "loss": 0.5}),
             '{"event": "window", "na']
    epochs, names = epochs_from_events(lines)
    assert [(e.warmup, e.units, e.steps, e.duration_s, e.loss) for e in epochs] == [
        (True, 10, 1, 1.0, None), (False, 200, 5, 2.0, 0.5)]
    assert names == {"warm": {"windows": 1, "units": 10, "seconds": 1.0},
                     "solve": {"windows": 1, "units": 200, "seconds": 2.0}}
    assert unit_from_events(lines) == "cells"


def test_the_command_line_is_checked_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert exec_params(EXEC, ["true", "x"], {}) == {"command": ["true", "x"], "cwd": str(tmp_path)}
    # The hpcc preset brings its own command, and needs hpcc on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(UsageError, match="preset hpcc runs 'hpcc', which was not found on PATH"):
        exec_params(EXEC, [], {"preset": "hpcc"})
    (bin_dir / "hpcc").write_text("#!/bin/sh\n")
    (bin_dir / "hpcc").chmod(0o755)
    assert exec_params(EXEC, [], {"preset": "hpcc"})["command"] is None  # the preset's stays
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(UsageError, match="is not executable"):
        exec_params(EXEC, ["./run.sh"], {})
    (bin_dir / "true").write_text("#!/bin/sh\n")
    (bin_dir / "true").chmod(0o755)
    with pytest.raises(UsageError, match="both count units"):
        exec_params(EXEC, ["true"], {"progress_regex": "(?P<units>1)", "api": True})
    with pytest.raises(UsageError, match="is not a unit name"):
        exec_params(EXEC, ["true"], {"units": "tok/s", "api": True})
    # In an image the program is the image's: not looked for on this host.
    assert exec_params(EXEC, ["/opt/app/solve"], {"image": "app.sif"})["command"] == ["/opt/app/solve"]


def test_the_report_has_a_default_amount_of_work_for_execs_units():
    """Energy x time for a fixed amount of work: one solution for time to solution,
    a million of a run's own --units; the benchmarks' amounts unchanged."""
    from hpcai.launcher.report.efficiency import default_work

    assert default_work("solutions/s") == 1.0
    assert default_work("iters/s") == 1e6
    assert default_work("tokens/s") == 1e9 and default_work("images/s") == 1e6
