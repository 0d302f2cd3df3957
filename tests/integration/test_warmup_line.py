"""A run says it is warming up before its first epoch ends (issue 41, item 5): the
warm-up epoch printed nothing for 80 s on a sweep."""
from __future__ import annotations

import pytest

from measured_runs import assert_measured

pytestmark = pytest.mark.slow


def test_the_warm_up_is_announced_before_the_first_epoch_line(cpu_node):
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--nproc", "1", "--device", "cpu",
                           "-o", str(cpu_node.results))
    assert_measured(done)  # exit 0, or 3 for a check a busy machine can fail
    lines = done.stderr.splitlines()
    announced = next(i for i, line in enumerate(lines) if "[hpcai] warm-up: 1 epoch(s) before anything is measured" in line)
    first_epoch = next(i for i, line in enumerate(lines) if line.startswith("[hpcai] epoch 1"))
    assert announced < first_epoch
    assert sum("warm-up: 1 epoch(s)" in line for line in lines) == 1  # rank 0 alone says it
