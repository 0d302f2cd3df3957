"""The report's roofline and hardware-correlation section, fed the seed
paper's published throughput (--reference) and crafted results of our own."""
import json

import numpy as np
import pytest

from conftest import assert_valid_result
from hpcai.launcher.report import ReportOptions, make_report, roofline
from hpcai.launcher.report.load import load_reference
from report_docs import make_result, write_result

# ResNet-50 counted per image (torchvision, fp32 training step): FLOPs and our bytes bound.
RESNET_FLOPS, RESNET_BYTES = 24.5e9, 1.6e9


def resnet_run(gpu, per_gpu, cap_w=700.0, power_w=600.0):
    doc = make_result(workload="resnet50", gpu=gpu, gpus=1, cap_w=cap_w, per_gpu=per_gpu,
                      power_per_gpu_w=power_w, default_limit_w=750.0)
    doc["config"].update(precision="tf32", flops_per_unit=RESNET_FLOPS, bytes_per_unit=RESNET_BYTES,
                         bytes_method="upper bound (crafted)")
    return doc


def test_the_papers_resnet50_at_700w_against_bandwidth_is_numpys_pearson():
    points = roofline.collect([], load_reference())
    corrs = {(c.measure, c.figure): c for c in roofline.correlations(points)
             if c.source == "paper" and c.workload == "resnet50" and c.cap_w == 700.0}
    c = corrs[("throughput per GPU", "memory bandwidth (TB/s)")]
    # Throughput: the seed paper's Table 3, 700 W (H100, H200, MI300X images/s per GPU).
    # Bandwidth: a second source, not the device table: the paper's own Table 2 for its
    # H100 (the 94 GB HBM2e part at 2.4 TB/s, not the 80 GB HBM3 SXM5 at 3.35), NVIDIA H200
    # product brief (4.8 TB/s), AMD CDNA 3 whitepaper (MI300X 5.3 TB/s).
    throughput, bandwidth = [1479.3, 2148.6, 1464.9], [2.4, 4.8, 5.3]
    assert c.n == 3
    assert c.pearson == pytest.approx(np.corrcoef(bandwidth, throughput)[0, 1], abs=1e-12)
    # Spearman: Pearson of the ranks (bandwidth 1,2,3; throughput 2,3,1)
    assert c.spearman == pytest.approx(np.corrcoef([1, 2, 3], [2, 3, 1])[0, 1])
    # The paper's H100 and H200 share every compute figure but bandwidth: peak has spread only from MI300X.
    assert corrs[("throughput per GPU", "peak TFLOP/s at the run's precision")].pearson is not None
    assert ("work per joule", "memory bandwidth (TB/s)") not in corrs  # the paper published no energy


def test_fewer_than_three_devices_say_so_instead_of_coefficients():
    points = roofline.collect([], [p for p in load_reference() if p.gpu != "MI300X"])
    table = roofline.correlation_table(roofline.correlations(points))
    rows = [[c.text for c in r] for r in table.rows if r[0].text == "resnet50" and r[3].text == "700 W"]
    assert len(rows) == 1 and rows[0][6] == "2" and rows[0][1] == "paper"
    assert "fewer than 3 devices (n = 2): no coefficients" in rows[0][7]
    assert all(c.pearson is None for c in roofline.correlations(points))


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
    corr = report["tables"]["hardware-correlation"]["rows"]
    ours = [r for r in corr if r[:5] == ["resnet50", "paper", "ours", "700 W", "work per joule"]]
    assert {r[5] for r in ours} >= {"memory bandwidth (TB/s)", "TDP (W)"} and all(r[6] == "3" for r in ours)
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
