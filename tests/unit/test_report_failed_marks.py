"""A left-out run's ✗ mark sits on its own run set's row at its own cap (issue 41,
item 2): three GPUs' results, each measured by two sweeps at the same caps (two run
sets per GPU), and one run per GPU that failed a validity check at a cap only it ran."""
from __future__ import annotations

from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.stats import aggregate
from hpcai.launcher.report.tables import FAILED_MARK, efficiency_tables, throughput_tables
from hpcai.measure import validity
from report_docs import make_result, write_result

GPUS = {"NVIDIA H100 80GB HBM3": ("nvidia", 500.0), "NVIDIA H200": ("nvidia", 600.0),
        "AMD Instinct MI300X": ("amd", 700.0)}


def _stalled(gpu: str, vendor: str, cap: float, sweep: str) -> dict:
    """A run whose last epoch stalled: it fails slow_epoch (hpcai/measure/validity.py)."""
    doc = make_result(gpu=gpu, vendor=vendor, cap_w=cap, sweep_id=sweep, window_s=60.0,
                      epochs=[1000.0, 1000.0, 1000.0, 1000.0, 300.0])
    doc["launcher"]["gpu_limits"] = [{"index": g["index"], "requested_w": cap, "enforced_at_start_w": cap,
                                      "enforced_at_end_w": cap} for g in doc["gpus"]]
    doc["validity"] = validity.evaluate(doc, "launcher")
    assert doc["validity"]["failed"] == ["slow_epoch"]
    return doc


def _three_gpus(folder):
    for gpu, (vendor, failed_cap) in GPUS.items():
        for sweep in ("a", "b"):
            for cap in (300.0, 400.0):
                write_result(folder, make_result(gpu=gpu, vendor=vendor, cap_w=cap, sweep_id=f"{gpu}-{sweep}"))
        write_result(folder, _stalled(gpu, vendor, failed_cap, f"{gpu}-b"))


def _marks(table) -> dict[tuple, str]:
    """(GPU cell, workload cell, cap) -> the cell's text, for the cells with a mark."""
    return {(row[1].text, row[0].text, table.header[i]): cell.text
            for row in table.rows for i, cell in enumerate(row) if FAILED_MARK in cell.text}


def test_each_failed_run_marks_only_its_own_run_set_at_its_own_cap(tmp_path):
    _three_gpus(tmp_path)
    runs, _ = read_runs([tmp_path])
    cells = aggregate(runs, None, 0.05)
    assert {c.group.series for c in cells} == {"run set 1", "run set 2"}
    (table,) = throughput_tables(cells, [], None, runs)
    assert len(table.rows) == 6  # two run sets per GPU; no row holding only marks
    marks = _marks(table)
    assert sorted(marks) == [("H100 ×4", "resnet50, run set 2", "500 W"),
                             ("H200 ×4", "resnet50, run set 2", "600 W"),
                             ("MI300X ×4", "resnet50, run set 2", "700 W")]
    assert set(marks.values()) == {f"– {FAILED_MARK} slow_epoch"}


def test_the_efficiency_table_marks_the_same_cells(tmp_path):
    _three_gpus(tmp_path)
    runs, _ = read_runs([tmp_path])
    cells = aggregate(runs, None, 0.05)
    (table,) = efficiency_tables(cells, [], "", runs)
    # The failed caps have no usable run, so no column here: no mark at all, and none misplaced.
    assert not _marks(table)
    assert table.header[2:] == ["300 W", "400 W"]


def test_one_run_set_takes_a_failed_run_of_another_sweep_on_its_row(tmp_path):
    """Without run sets (one sweep per GPU) a failed run of any origin marks the GPU's one row."""
    write_result(tmp_path, make_result(cap_w=300.0, sweep_id="a"))
    write_result(tmp_path, _stalled("NVIDIA H100 80GB HBM3", "nvidia", 400.0, "elsewhere"))
    runs, _ = read_runs([tmp_path])
    (table,) = throughput_tables(aggregate(runs, None, 0.05), [], None, runs)
    assert len(table.rows) == 1 and list(_marks(table)) == [("H100 ×4", "resnet50", "400 W")]
