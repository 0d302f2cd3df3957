"""Tables fit the terminal (issue 41, item 10): `check` and `results ls` wrap
their free-text last column below the row on a narrow terminal and keep one line
per row elsewhere; `results ls` says why a complete run is not counted."""
from __future__ import annotations

import io

from click.testing import CliRunner

from hpcai.launcher.cli.check import table
from hpcai.launcher.cli.hpcai_launch import main
from hpcai.launcher.cli.terminal import CONTINUATION, fitted, width
from hpcai.measure import validity
from report_docs import make_result, write_result

NOTE = "p95 812 W above the maximum limit 700 W x 1.05; the boards drew more than their limit allows " * 2


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _checks() -> list[dict]:
    return [{"name": "power_range", "subject": "GPU 0", "value": 812.0, "unit": "W", "threshold": "[650 W idle, 735 W]",
             "verdict": "fail", "note": NOTE},
            {"name": "throughput_cv", "subject": "run", "value": 0.01, "threshold": "<= 0.05", "verdict": "pass"}]


def test_a_long_note_wraps_below_its_row_within_the_width():
    lines = table(_checks(), columns=80)
    assert all(len(line) <= 80 for line in lines), [len(x) for x in lines]
    assert lines[1].startswith("power_range") and lines[1].rstrip().endswith("FAIL")
    assert lines[2].startswith(CONTINUATION + "p95 812 W")
    assert " ".join(x.strip() for x in lines[2:-1]) == NOTE.strip()
    assert lines[-1].startswith("throughput_cv")


def test_without_a_terminal_each_row_stays_one_line():
    lines = table(_checks(), columns=None)
    assert len(lines) == 3 and lines[1].endswith(NOTE.strip())
    assert width(io.StringIO()) is None and isinstance(width(Terminal()), int)
    assert fitted("a  b", "short", 80) == ["a  b  short"]


def test_results_ls_says_why_a_complete_run_is_not_counted(tmp_path):
    good = make_result(cap_w=300.0)
    bad = make_result(cap_w=400.0, epochs=[1000.0, 1000.0, 1000.0, 1000.0, 300.0], window_s=60.0)
    for doc in (good, bad):
        cap = doc["spec"]["power"]["cap_w"]
        doc["launcher"]["gpu_limits"] = [{"index": g["index"], "requested_w": cap, "enforced_at_start_w": cap,
                                          "enforced_at_end_w": cap} for g in doc["gpus"]]
        doc["validity"] = validity.evaluate(doc, "launcher")
        write_result(tmp_path / "results", doc)
    assert bad["status"] == "complete" and "slow_epoch" in bad["validity"]["failed"]
    done = CliRunner().invoke(main, ["results", "ls", str(tmp_path / "results")])
    assert done.exit_code == 0, done.output
    rows = {line.split()[0]: line for line in done.output.splitlines()[1:-1]}
    assert rows[good["run_id"]].split()[1] == "yes"
    assert "no: failed validity check(s)" in rows[bad["run_id"]]
    assert "complete" not in rows[bad["run_id"]].split("  ")[1]
