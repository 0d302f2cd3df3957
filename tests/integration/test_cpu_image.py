"""The CPU `cv` image, built from definitions/cpu/ with a real Apptainer
through `hpcai-launch images build`, and a tiny ResNet-50 run in it through
the launcher. The slowest test of the suite: the build takes minutes.

HPCAI_TEST_IMAGES_DIR keeps the image between runs on a development machine
(it is rebuilt only when missing); CI builds it fresh.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import assert_valid_result
from image_fixtures import IMAGE_BUILD_TIMEOUT_S
from hpcai.launcher.images import store
from hpcai.provenance import hpcai_commit
from hpcai.workloads.catalog import family_workloads

# The first test pays for the image build (about 10 minutes on 2 cores, more
# when the machine is busy), which pytest-timeout counts as the test's time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(IMAGE_BUILD_TIMEOUT_S)]
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]


def launch(*args, cpu_env: dict, timeout=1800) -> subprocess.CompletedProcess:
    env = {k: v for k, v in cpu_env.items() if k != "HPCAI_IMAGES_DIR"}
    return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def built(cpu_cv_image):
    return cpu_cv_image


def test_build_labels_the_image_with_what_it_carries(built, apptainer_exe):
    out = subprocess.run([apptainer_exe, "inspect", "--json", "--labels", str(built["image"])],
                         capture_output=True, text=True, check=True).stdout
    labels = store.hpcai_labels(json.loads(out)["data"]["attributes"]["labels"])
    assert labels["flavour"] == "cpu" and labels["family"] == "cv"
    assert labels["workloads"] == ",".join(family_workloads("cv"))
    assert labels["base-image"] and labels["version"]
    if not os.environ.get("HPCAI_TEST_IMAGES_DIR"):  # a kept image may come from older code
        assert labels["commit"] == hpcai_commit()


def test_the_sites_mksquashfs_args_reach_the_image(built, apptainer_exe):
    """The CI site's `images.mksquashfs_args` (gzip level 1): mksquashfs records the
    level in the file system's superblock, read here from the SIF's partition."""
    if os.environ.get("HPCAI_TEST_IMAGES_DIR"):
        pytest.skip("a kept image may come from an older site file")  # HPCAI_TEST_IMAGES_DIR only
    listed = subprocess.run([apptainer_exe, "sif", "list", str(built["image"])],
                            capture_output=True, text=True, check=True).stdout
    (start,) = re.findall(r"\|(\d+)-\d+\s*\|FS \(Squashfs", listed)
    shown = subprocess.run(["unsquashfs", "-s", "-o", start, str(built["image"])],
                           capture_output=True, text=True, check=True).stdout
    assert re.search(r"^Compression gzip\n\s+compression-level 1$", shown, re.M), shown


def test_image_passes_its_own_test(built, apptainer_exe):
    proc = subprocess.run([apptainer_exe, "test", str(built["image"])], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch" in proc.stdout + proc.stderr


def test_resnet50_runs_in_the_image_and_records_it(built, cpu_node, result_schema, tmp_path):
    results = tmp_path / "results"
    # One process (the image's %runscript): Debian's torch 2.6 lacks libuv, which
    # torchrun's c10d store asks for, so two processes fail in this image.
    proc = launch("resnet50", "--preset", "tiny", "--nproc", "1", "--runtime", "apptainer",
                  "--site", str(built["site"]), "-o", str(results), cpu_env=cpu_node.env,
                  timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "runtime: apptainer" in proc.stderr
    (result_path,) = results.glob("*/result.json")
    doc = json.loads(result_path.read_text())
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["throughput"]["node"] > 0
    runtime = doc["runtime"]
    assert runtime["kind"] == "apptainer"
    assert runtime["image"]["sha256"] == store.sha256(built["image"])
    assert runtime["image"]["labels"]["org.hpcai.family"] == "cv"
    assert runtime["apptainer"]["version"]
    # The workload ran on the image's Python and PyTorch (Debian's), not the host's.
    import torch

    image_torch = doc["software"]["framework_version"]
    assert image_torch and image_torch != torch.__version__
    assert doc["software"]["python"] != ".".join(map(str, sys.version_info[:3]))
    assert doc["software"]["hpcai_commit"] == runtime["image"]["labels"]["org.hpcai.commit"]

    # The same workload on the host runtime: one schema, the same fields.
    host = launch("resnet50", "--preset", "tiny", "--nproc", "1", "--runtime", "host", "-o", str(tmp_path / "host"),
                  cpu_env=cpu_node.env, timeout=900)
    assert host.returncode == 0, host.stderr[-4000:]
    (host_path,) = (tmp_path / "host").glob("*/result.json")
    host_doc = json.loads(host_path.read_text())
    assert_valid_result(host_doc, result_schema)
    assert set(host_doc) == set(doc)
    assert host_doc["runtime"] == {"kind": "host", "image": None}


def test_cosmoflow_runs_in_the_image(built, cpu_node, result_schema, tmp_path):
    """CosmoFlow (issue 18 §6) in the cv image it is declared in: the image's torch
    trains it, one process (see the ResNet-50 test), and the result is valid."""
    results = tmp_path / "results"
    proc = launch("cosmoflow", "--preset", "tiny", "--nproc", "1", "--runtime", "apptainer",
                  "--site", str(built["site"]), "-o", str(results), cpu_env=cpu_node.env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (result_path,) = results.glob("*/result.json")
    doc = json.loads(result_path.read_text())
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["runtime"]["kind"] == "apptainer"
    assert doc["throughput"]["unit"] == "samples/s" and doc["throughput"]["node"] > 0
    assert "cosmoflow" in doc["runtime"]["image"]["labels"]["org.hpcai.workloads"].split(",")
