"""The roofline and correlation figures keep presets apart (issue 31: a `short` and a
`tiny` run were one row, the mean throughput of both times the `short` run's FLOPs,
and the paper's rows took the FLOPs of whichever run was read first). Every figure
below is checked against a computation by hand."""
import pytest

from hpcai.launcher.report import roofline
from hpcai.launcher.report.load import load_reference, read_runs
from report_docs import make_result, write_result

H100, H200, MI300X = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "AMD Instinct MI300X"
# Device table (hpcai/devices/gpus.toml): H100 SXM tf32 dense peak 494.5 TFLOP/s, 3.35 TB/s.
H100_TF32, H100_TBS = 494.5, 3.35


def run(folder, gpu, preset, per_gpu, flops, moved, cap_w=700.0):
    doc = make_result(workload="resnet50", gpu=gpu, gpus=1, preset=preset, cap_w=cap_w, per_gpu=per_gpu,
                      power_per_gpu_w=600.0, default_limit_w=750.0)
    doc["config"].update(precision="tf32", flops_per_unit=flops, bytes_per_unit=moved,
                         bytes_method="upper bound (crafted)")
    write_result(folder, doc)


@pytest.fixture
def mixed(tmp_path):
    """`tiny` runs written first (so read first), then `paper`, then a `short` grid
    over two input sizes (two FLOP counts of one preset)."""
    folder = tmp_path / "results"
    run(folder, H100, "tiny", 300.0, 1.2e9, 0.3e9)
    run(folder, H100, "tiny", 500.0, 1.2e9, 0.3e9)
    run(folder, H200, "tiny", 700.0, 1.2e9, 0.3e9)
    run(folder, MI300X, "tiny", 450.0, 1.2e9, 0.3e9)
    run(folder, H100, "paper", 1400.0, 24.5e9, 1.6e9)
    run(folder, H100, "short", 100.0, 10e9, 1e9)
    run(folder, H100, "short", 50.0, 24.5e9, 1.6e9)
    runs, _ = read_runs([folder])
    return runs


def rows(table):
    return {(r[0].text, r[1].text, r[2].text, r[3].text): r for r in table.rows}


def test_each_preset_is_its_own_row_with_its_own_flops(mixed):
    points = roofline.collect(mixed, load_reference())
    eff = rows(roofline.efficiency_table(points))
    achieved = lambda key: eff[key][5].value  # noqa: E731
    # paper: 1400 img/s x 24.5 GFLOP = 34.3 TFLOP/s; intensity 24.5/1.6 = 15.3125 FLOP/B;
    # bound min(494.5, 15.3125 x 3.35 = 51.296875); of bound 34.3 / 51.296875.
    paper = eff[("resnet50", "paper", "H100", "700 W")]
    assert achieved(("resnet50", "paper", "H100", "700 W")) == pytest.approx(34.3)
    assert paper[8].value == pytest.approx(15.3125) and paper[9].value == pytest.approx(51.296875)
    assert paper[10].value == pytest.approx(34.3 / 51.296875)
    assert paper[7].value == pytest.approx(34.3 / H100_TF32)
    # tiny: the mean of 300 and 500 = 400 img/s x 1.2 GFLOP = 0.48; intensity 4; bound 4 x 3.35 = 13.4.
    tiny = eff[("resnet50", "tiny", "H100", "700 W")]
    assert achieved(("resnet50", "tiny", "H100", "700 W")) == pytest.approx(0.48)
    assert tiny[8].value == pytest.approx(4.0) and tiny[9].value == pytest.approx(4.0 * H100_TBS)
    assert tiny[10].value == pytest.approx(0.48 / 13.4)
    # short at two input sizes: 100 x 10 GFLOP = 1.0 and 50 x 24.5 GFLOP = 1.225, never mixed.
    assert achieved(("resnet50", "short, 10 GFLOP/image", "H100", "700 W")) == pytest.approx(1.0)
    assert achieved(("resnet50", "short, 24.5 GFLOP/image", "H100", "700 W")) == pytest.approx(1.225)
    # The paper's H100 row at 700 W (1479.3 img/s published) takes the paper run's FLOPs, not
    # tiny's (read first): 1479.3 x 24.5e9 = 36.24285 TFLOP/s.
    assert achieved(("resnet50", "paper", "H100 (paper)", "700 W")) == pytest.approx(36.24285)
    ours = [k for k in eff if k[2] == "H100"]
    assert len(ours) == 4  # paper, tiny, short x 2: one row each


def test_correlations_are_per_preset(mixed):
    corrs = {(c.source, c.config, c.measure, c.figure): c for c in roofline.correlations(roofline.collect(mixed, None))
             if c.cap_w == 700.0}
    tiny = corrs[("ours", "tiny", "throughput per GPU", "memory bandwidth (TB/s)")]
    # tiny on three devices: H100 400 (mean of 300, 500), H200 700, MI300X 450: counted per
    # device model, and too few models for a coefficient (issue 41: at n = 3 it is noise).
    assert tiny.n == 3 and tiny.pearson is None and tiny.spearman is None
    # paper and short ran on the H100 only: one device, no coefficients.
    assert corrs[("ours", "paper", "throughput per GPU", "memory bandwidth (TB/s)")].n == 1
    assert corrs[("ours", "paper", "throughput per GPU", "memory bandwidth (TB/s)")].pearson is None


def test_without_a_paper_run_the_papers_rows_take_the_flop_model_of_the_paper_preset(tmp_path):
    """Issue 41: the paper's rows get their FLOPs per unit from the workload's FLOP model for
    the `paper` preset (counted on the meta device), never from another preset's run."""
    folder = tmp_path / "results"
    run(folder, H100, "tiny", 400.0, 1.2e9, 0.3e9)
    runs, _ = read_runs([folder])
    reference = load_reference()
    points = roofline.collect(runs, reference)
    from hpcai.workloads.catalog import WORKLOADS

    model = WORKLOADS["resnet50"].impls["pytorch"].flops(dict(WORKLOADS["resnet50"].presets["paper"].params))
    paper = [p for p in points if p.source == "paper" and p.workload == "resnet50"]
    assert paper and all(p.flops_per_unit == model["train_per_image"] != 1.2e9 for p in paper)
    h100_200 = next(p for p in paper if p.label == "H100 (paper)" and p.cap_w == 200.0)
    # The paper's H100 at 200 W (Table 3) x 24.3 GFLOP per image: about 20.5 TFLOP/s.
    assert h100_200.achieved_tflops == pytest.approx(h100_200.per_gpu * model["train_per_image"] / 1e12)
    assert 19.5 < h100_200.achieved_tflops < 21.5
    notes = roofline.paper_flops_notes(runs, reference)
    assert any(n.startswith("The paper's resnet50 rows: FLOPs and bytes per unit of the paper's configuration, "
                            "counted by the workload's FLOP model for the `paper` preset (computed, not a run)")
               for n in notes), notes
    # LitGPT counts its FLOPs at run time: without a paper run, those rows have none and say why.
    assert all(p.flops_per_unit is None for p in points if p.source == "paper" and p.workload == "llama3-8b-pretrain")
    assert any(n.startswith("The paper's llama3-8b-pretrain rows have no achieved TFLOP/s") for n in notes), notes
