"""Issue 40: a GPU lost while a capped run holds it. The GPU library is the FAKE
pynvml (tests/fakes: a lost GPU answers NVML_ERROR_GPU_IS_LOST); the launcher,
the program (`exec`), the cap's set-and-restore and the result are real.
"""
import json
import sys

import pytest

from conftest import FAKES

pytestmark = pytest.mark.slow

# Loses GPU 1 (as a GPU falls off the bus), then ends well: its result is `complete`.
LOSE_GPU_1 = [sys.executable, "-c",
              f"import os, sys; sys.path.insert(0, {str(FAKES)!r}); import fake_gpu_state as f; "
              "f.update_device(os.environ['HPCAI_FAKE_GPU_STATE'], 1, inaccessible='gpu_is_lost')"]


def test_a_gpu_lost_during_a_run_leaves_no_complete_result_without_the_launchers_step(fake_nvidia_node):
    """Fault: restoring the lost GPU's cap failed and the launcher stopped there: the
    program's `complete` result stayed on disk without the launcher's block."""
    node = fake_nvidia_node
    done = node.launch("exec", "--cap", "300", "-o", str(node.results), "--", *LOSE_GPU_1)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("hpcai-launch: ") and "could not restore power limits" in lines[-1], done.stderr
    [path] = list(node.results.rglob("result.json"))
    result = json.loads(path.read_text())
    assert result.get("launcher"), f"{result['status']} without the launcher's block"
    gpu_limits = {g["index"]: g for g in result["launcher"]["gpu_limits"]}
    assert gpu_limits[1]["enforced_at_end_w"] is None  # not known: the GPU was gone
    assert node.limits()[0] == 700.0  # the healthy GPU restored
    assert node.journal_files()  # kept: it still names the lost GPU's limit
    restore = node.launch("power", "restore")
    assert restore.returncode != 0 and "delete" not in restore.stderr and "unreachable" in restore.stderr
