"""NaN and infinities on the command line are one-line errors before anything
changes on the node (issue 25, section 3): click's FloatRange lets "nan" pass
every bound, and these used to fail after the cap was set (--max-window-s nan,
--min-window-s inf: a traceback) or leave sweep.json `running` (--idle-s nan).
Under the FAKE NVML (tests/fakes/pynvml.py): two fake H100s at 700 W."""
from __future__ import annotations

import pytest

from conftest import one_line_error


@pytest.mark.parametrize("args,flag", [
    (["--cap", "300", "--ci-target", "0.05", "--max-window-s", "nan"], "--max-window-s"),
    (["--cap", "300", "--ci-target", "0.05", "--min-window-s", "inf"], "--min-window-s"),
    (["--cap", "200,300", "--idle-s", "nan"], "--idle-s"),
    (["--cap", "300", "--sample-interval-ms", "nan"], "--sample-interval-ms"),
])
def test_non_finite_options_are_refused_before_any_cap(fake_nvidia_node, args, flag):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cuda", "--runtime", "host",
                       "-o", str(node.results), *args)
    one_line_error(done, f"{flag} is nan" if "nan" in args else f"{flag} is inf", "not a finite number")
    assert node.limits() == [700.0, 700.0]  # never capped
    assert node.journal_files() == []
    assert not node.results.exists() or not any(node.results.rglob("*.json"))


@pytest.mark.parametrize("args,fragment", [
    (["report", "{results}", "--node-overhead-w", "nan"], "--node-overhead-w is nan, not a finite number"),
    (["report", "{results}", "--node-overhead-w", "inf"], "--node-overhead-w is inf, not a finite number"),
    (["report", "{results}", "--work", "nan"], "--work is nan, not a finite number"),
    (["report", "{results}", "--noisy-cv", "inf"], "--noisy-cv is inf, not a finite number"),
    (["report", "{results}", "--max-slowdown", "nan"], "--max-slowdown is nan, not a finite number"),
    (["fleet", "run", "--selftest-s", "nan"], "--selftest-s is nan, not a finite number"),
    (["fleet", "run", "--selftest-s", "inf"], "--selftest-s is inf, not a finite number"),
    (["resnet50", "--device", "cpu", "--repeat", "99999999999999999999", "--dry-run"],
     "'--repeat': 99999999999999999999 is more than a sweep's 200 runs"),
    (["resnet50", "--device", "cpu", "--cap", "200:700:1e-320", "--dry-run"],
     "range '200:700:1e-320' gives more than 200 caps"),
])
def test_every_commands_numbers_are_checked_in_one_line_before_anything(cpu_node, tmp_path, args, fragment):
    """Every float option of every command (finite_options.guard_floats), --repeat and
    a cap range's step: one line, exit 2, no report written, nothing measured."""
    from report_docs import make_result, write_result

    write_result(tmp_path / "results", make_result())
    out = tmp_path / "report"
    given = [a.format(results=tmp_path / "results") for a in args]
    done = cpu_node.launch(*given, *(["-o", str(out)] if given[0] == "report" else []), timeout=120)
    assert done.returncode == 2
    one_line_error(done, fragment)
    assert not out.exists()
