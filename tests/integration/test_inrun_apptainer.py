"""The in-run sweep's control channel through a real Apptainer run: the
workload runs inside the CPU `cv` image (built by `hpcai-launch images build`,
see test_cpu_image.py), the launcher on the host sets the caps on the FAKE
pynvml (tests/fakes; the image does not see it, so the workload measures no
GPU power) when the workload asks through files in the bound run folder.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import assert_valid_result
from image_fixtures import IMAGE_BUILD_TIMEOUT_S
from measured_runs import assert_measured, finished

pytestmark = [pytest.mark.slow, pytest.mark.timeout(IMAGE_BUILD_TIMEOUT_S)]
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]


def test_an_in_run_sweep_inside_the_image_gets_each_cap_from_the_host_launcher(
        cpu_cv_image, fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    env = {k: v for k, v in node.env.items() if k != "HPCAI_IMAGES_DIR"}
    # One process (the image's torch lacks libuv for torchrun's store). The CPU image
    # by --image: on a node with (fake) NVIDIA GPUs the launcher would pick the cuda one;
    # no telemetry: the CPU image has no nvidia-ml-py to read the GPUs the node reports
    # (the caps are the launcher's, on the host, and are what this test is about).
    proc = subprocess.run(
        [*LAUNCHER, "resnet50", "--preset", "tiny", "--nproc", "1", "--device", "cpu",
         "--runtime", "apptainer", "--site", str(cpu_cv_image["site"]),
         "--image", str(cpu_cv_image["image"]), "--no-telemetry", "--in-run",
         "--cap", "200,300", "--order", "ascending", "--max-window-s", "2", "--idle-s", "0",
         "-o", str(node.results)],
        capture_output=True, text=True, env=env, timeout=1800)
    failed = assert_measured(proc)  # exit 0, or 3 for what a loaded machine fails (CI saw it)
    assert "runtime: apptainer" in proc.stderr
    # Caps set on the host, one after the other, the snapshot back at the end.
    assert [e["watts"] for e in node.devices()[0]["set_log"]] == [200.0, 300.0, 700.0]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    (sweep,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    (process,) = [p for p in sweep.iterdir() if p.name.endswith("-inrun")]
    # The workload inside the image wrote its requests into the bound folder.
    assert sorted(p.name for p in (process / "control").glob("request-*.json")) == \
        ["request-0.json", "request-1.json", "request-2.json"]
    docs = sorted((json.loads(p.read_text()) for p in sweep.glob("*/result.json")),
                  key=lambda d: d["segment"]["index"])
    assert [d["spec"]["power"]["cap_w"] for d in docs] == [200.0, 300.0]
    for doc in docs:
        assert_valid_result(doc, result_schema)
        assert finished([doc["status"]], failed) and doc["runtime"]["kind"] == "apptainer"
        assert doc["segment"]["enforced_w"]["0"] == doc["spec"]["power"]["cap_w"]
