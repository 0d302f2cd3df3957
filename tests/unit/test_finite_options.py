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
    one_line_error(done, f"{flag} nan" if "nan" in args else f"{flag} inf", "not a finite number")
    assert node.limits() == [700.0, 700.0]  # never capped
    assert node.journal_files() == []
    assert not node.results.exists() or not any(node.results.rglob("*.json"))
