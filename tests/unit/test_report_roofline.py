"""The report's roofline and hardware-correlation section, fed the seed
paper's published throughput (--reference) and crafted results of our own."""
import json

import numpy as np
import pytest

from conftest import assert_valid_result
from hpcai.launcher.report import ReportOptions, make_report, roofline
from hpcai.launcher.report.load import load_reference, read_runs
from report_docs import make_result, write_result

# ResNet-50 counted per image (torchvision, fp32 training step): FLOPs and our bytes bound.
RESNET_FLOPS, RESNET_BYTES = 24.5e9, 1.6e9


def resnet_run(gpu, per_gpu, cap_w=700.0, power_w=600.0):
    doc = make_result(workload="resnet50", gpu=gpu, gpus=1, cap_w=cap_w, per_gpu=per_gpu,
                      power_per_gpu_w=power_w, default_limit_w=750.0)
    doc["config"].update(precision="tf32", flops_per_unit=RESNET_FLOPS, bytes_per_unit=RESNET_BYTES,
                         bytes_method="upper bound (crafted)")
    return doc


def test_the_papers_three_devices_are_too_few_for_a_coefficient_and_the_statistics_are_numpys():
    points = roofline.collect([], load_reference())
    corrs = {(c.measure, c.figure): c for c in roofline.correlations(points)
             if c.source == "paper" and c.workload == "resnet50" and c.cap_w == 700.0}
    c = corrs[("throughput per GPU", "memory bandwidth (TB/s)")]
    assert c.n == 3 and c.pearson is None and c.spearman is None  # issue 41: n = 3 is noise
    assert ("work per joule", "memory bandwidth (TB/s)") not in corrs  # the paper published no energy
    # The coefficients themselves, on the paper's 700 W row: Table 3 (H100, H200, MI300X images/s
    # per GPU) against bandwidth from a second source: the paper's own Table 2 for its H100 (the
    # 94 GB HBM2e part at 2.4 TB/s), NVIDIA H200 product brief (4.8), AMD CDNA 3 whitepaper (5.3).
    throughput, bandwidth = [1479.3, 2148.6, 1464.9], [2.4, 4.8, 5.3]
    assert roofline.pearson(bandwidth, throughput) == pytest.approx(np.corrcoef(bandwidth, throughput)[0, 1], abs=1e-12)
    # Spearman: Pearson of the ranks (bandwidth 1,2,3; throughput 2,3,1)
    assert roofline.spearman(bandwidth, throughput) == pytest.approx(np.corrcoef([1, 2, 3], [2, 3, 1])[0, 1])


def test_too_few_devices_are_one_note_not_rows():
    corrs = roofline.correlations(roofline.collect([], load_reference()))  # the paper: 3 devices
    assert roofline.correlation_table(corrs) is None
    note = roofline.correlation_note(corrs)
    assert "ran on fewer than 5 device models (at most 3): too few for a correlation" in note
    assert all(c.pearson is None for c in corrs)


def test_five_devices_give_coefficients_with_their_fisher_interval(tmp_path):
    gpus = {"NVIDIA H100 80GB HBM3": 1400.0, "NVIDIA H200": 2100.0, "AMD Instinct MI300X": 1450.0,
            "NVIDIA A100-SXM4-80GB": 900.0, "NVIDIA B200": 2900.0}
    for gpu, per_gpu in gpus.items():
        write_result(tmp_path, resnet_run(gpu, per_gpu))
    runs, _ = read_runs([tmp_path])
    corrs = [c for c in roofline.correlations(roofline.collect(runs, None)) if c.measure == "throughput per GPU"]
    c = next(c for c in corrs if c.figure == "memory bandwidth (TB/s)")
    assert c.n == 5 and c.pearson is not None
    low, high = c.interval("pearson")
    z, se = np.arctanh(c.pearson), 1 / np.sqrt(5 - 3)
    assert (low, high) == pytest.approx((np.tanh(z - 1.959964 * se), np.tanh(z + 1.959964 * se)))
    row = next(r for r in roofline.correlation_table(corrs).rows if r[5].text == "memory bandwidth (TB/s)")
    assert row[6].text == "5" and f"(95% CI {low:.2f} to {high:.2f})" in row[7].text


def test_ranks_share_ties():
    assert roofline.ranks([10.0, 20.0, 10.0, 5.0]) == [2.5, 4.0, 2.5, 1.0]
    assert roofline.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # no spread: undefined


def test_the_report_has_roofline_and_correlation_sections(tmp_path, result_schema):
    results = tmp_path / "results"
    docs = [resnet_run("NVIDIA H100 80GB HBM3", 1400.0), resnet_run("NVIDIA H200", 2100.0),
            resnet_run("AMD Instinct MI300X", 1450.0, power_w=700.0),
            resnet_run("NVIDIA RTX A1000", 100.0)]  # not an A100: no device figures
    for doc in docs:
        assert_valid_result(doc, result_schema)
        write_result(results, doc)
    make_report([results], ReportOptions(output=tmp_path / "report", reference=True))
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    # Three device models of ours and three of the paper: too few for any coefficient.
    assert "hardware-correlation" not in report["tables"]
    eff = {(r[2], r[3]): r[1:] for r in report["tables"]["efficiency-vs-peak"]["rows"] if r[0] == "resnet50"}
    # H100 SXM, tf32: 1400 img/s x 24.5 GFLOP = 34.3 TFLOP/s of 494.5 -> 6.9 %
    h100 = eff[("H100", "700 W")]
    assert h100[4] == "34.3" and h100[5] == "494.5" and h100[6] == "6.9%"
    # intensity 24.5e9 / 1.6e9 = 15.3 FLOP/B; bound min(494.5, 15.3 x 3.35) = 51.3 TFLOP/s
    assert h100[7] == "15.3" and h100[8] == "51.297"
    # the paper's rows take our counted FLOPs: 1479.3 x 24.5e9 = 36.243 TFLOP/s
    assert eff[("H100 (paper)", "700 W")][4] == "36.243"
    names = {p["name"] for p in report["plots"]}
    assert {"roofline-h100-sxm", "roofline-h200-sxm", "roofline-mi300x"} <= names
    assert (tmp_path / "report" / "plots" / "roofline-mi300x.svg").stat().st_size > 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Roofline and hardware correlation" in md
    assert "Not in the device table (no roofline or correlation): RTX A1000." in md
    assert "the parts its Table 2 names: H100 = H100 SXM5 94GB HBM2e (94 GB HBM2e, 2.4 TB/s)" in md
