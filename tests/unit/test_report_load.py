"""Reading results and the reference figures for the report."""
import json

import pytest

from hpcai.errors import ConfigError, UsageError
from hpcai.launcher.report.load import load_reference, read_runs
from hpcai.measure.gpu_names import short_name as short_gpu_name
from report_docs import crafted_set, make_result, write_result


@pytest.mark.parametrize("full,short", [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI250X / MI250", "MI250X"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("Some Accelerator X9", "Some Accelerator"),
])
def test_short_gpu_names(full, short):
    assert short_gpu_name(full) == short


def test_the_packaged_reference_is_the_seed_papers_tables():
    points = load_reference()
    assert len(points) == 5 * (6 + 6 + 7)  # workloads x (H100, H200, MI300X caps)
    h100 = {p.cap_w: p for p in points if p.workload == "resnet50" and p.gpu == "H100"}
    assert h100[200.0].throughput == pytest.approx(842.78) and h100[200.0].enforced
    mi = {p.cap_w: p for p in points if p.workload == "vit-l16" and p.gpu == "MI300X"}
    assert mi[300.0].enforced is False and mi[400.0].enforced is True
    assert {p.unit for p in points if p.workload.startswith("llama3")} == {"tokens/s"}


@pytest.mark.parametrize("text,fragment", [
    ("workload,gpu,cap,throughput,unit,enforced\n", "has columns"),
    ("workload,gpu,cap_w,throughput,unit,enforced\nresnet50,H100,abc,1,images/s,true\n",
     "line 2"),
    (("# only a comment\nworkload,gpu,cap_w,throughput,unit,enforced\n"
     "resnet50,H100,200,1,img/s,true\n"), "line 3"),
    ("", "has no rows"),
])
def test_a_bad_reference_file_is_a_one_line_config_error(tmp_path, text, fragment):
    path = tmp_path / "ref.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_reference(path)
    assert fragment in err.value.one_line()


def test_results_are_read_labelled_and_the_unusable_ones_kept_with_why(tmp_path):
    docs = crafted_set(tmp_path)
    broken = make_result(cap_w=600.0)
    del broken["throughput"]
    write_result(tmp_path, broken)
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "result.json").write_text("{not json")
    runs, sweeps = read_runs([tmp_path])
    by_id = {r.run_id: r for r in runs}
    assert len(runs) == len(docs) + 2 and sweeps == []
    h100 = by_id[docs["h100-200"]["run_id"]]
    assert (h100.device, h100.device_full, h100.processes) == ("H100", "NVIDIA H100 80GB HBM3", 4)
    assert h100.usable and h100.enforced is True and h100.samples_path is not None
    # Efficiency recomputed from energy, window and overhead (see crafted_set).
    assert h100.efficiency() == pytest.approx(32000 / 9000)
    assert h100.efficiency(0.0) == pytest.approx(4.0)
    assert h100.efficiency(200.0) == pytest.approx(3.2)
    assert h100.efficiency() == pytest.approx(h100.units_per_joule_with_overhead)
    assert h100.per_epoch_per_gpu == pytest.approx([790.0, 800.0, 810.0])
    mi = by_id[docs["mi300x-200"]["run_id"]]
    assert mi.device == "MI300X" and mi.enforced is False
    failed = by_id[docs["h100-500-failed"]["run_id"]]
    assert failed.status == "failed" and not failed.usable
    invalid = by_id[broken["run_id"]]
    assert invalid.status == "invalid" and "schema" in invalid.problems[0]
    garbage = [r for r in runs if r.status == "unreadable"]
    assert len(garbage) == 1 and not garbage[0].usable


def test_cpu_results_are_labelled_cpu_and_say_power_was_not_measured(tmp_path):
    write_result(tmp_path, make_result(device_type="cpu", vendor=None, gpus=2, cap_w=None,
                                       cpu_model="Intel(R) Xeon(R) Processor"))
    (run,), _ = read_runs([tmp_path])
    assert run.device == "CPU" and run.device_full == "Intel(R) Xeon(R) Processor"
    assert run.usable and not run.power_available and run.efficiency() is None
    assert "no power source" in run.power_reason


def test_sweep_summaries_are_found_and_no_results_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no result.json"):
        read_runs([tmp_path / "empty"])
    write_result(tmp_path / "sw", make_result())
    (tmp_path / "sw" / "sweep.json").write_text(json.dumps({"sweep_id": "sw", "runs": []}))
    runs, sweeps = read_runs([tmp_path / "sw"])
    assert len(runs) == 1 and sweeps[0].doc["sweep_id"] == "sw"
