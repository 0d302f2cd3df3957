"""A run on part of a node of FAKE GPUs (tests/fakes pynvml): the job owns
one GPU of four, names it by UUID, and everything the run reports (the
console power line, samples.csv, the result) covers that GPU alone.
Real PyTorch on the CPU; the GPUs are only read and capped."""
import csv
import re

import pytest

from conftest import FakeNode, assert_valid_result
from fakes import fake_gpu_state as fgs

pytestmark = pytest.mark.slow


def test_a_run_on_one_gpu_of_four_reports_that_gpu_alone(tmp_path, result_schema):
    devices = fgs.make_devices(4, "nvidia")
    devices[0]["inaccessible"] = "no_permission"  # another job's GPU
    node = FakeNode(tmp_path, devices)
    node.update(3, power_draw_w=100.0)  # the other GPUs draw 650 W each
    node.env["CUDA_VISIBLE_DEVICES"] = devices[3]["uuid"][4:]  # its UUID without "GPU-"
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1",
                       "--cap", "300", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert [g["index"] for g in doc["gpus"]] == [3]
    assert doc["gpus"][0]["uuid"] == devices[3]["uuid"]
    assert doc["gpus"][0]["limits"]["enforced_w"] == 300.0
    assert doc["power"]["mean_power_w"] == pytest.approx(100.0, rel=0.1)
    # The flag is what the run decides from the window it measured (a loaded machine
    # stretches the tiny preset past 10 s), so hold it to that window, not to a speed.
    quality = doc["power"]["quality"]
    assert quality["window_short"] is (doc["power"]["window_s"] < quality["min_window_s"])
    rows = list(csv.DictReader((node.results / doc["run_id"] / "samples.csv").open()))
    assert {r["source"] for r in rows} == {"gpu3"}
    # The per-epoch console line sums the run's GPU only: 100 W, not 100 + 2 x 650.
    powers = [float(p) for p in re.findall(r"power (\d+) W", done.stderr)]
    assert powers and all(p < 150 for p in powers)
    assert [d["current_limit_w"] for d in node.devices()] == [700.0] * 4  # 3 capped, then restored
    assert [e["watts"] for e in node.devices()[3]["set_log"]] == [300.0, 700.0]
    assert node.devices()[1]["set_log"] == []
