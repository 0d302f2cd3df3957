"""CosmoFlow (issue 18 §2): the MLPerf HPC reference model in PyTorch, its FLOPs
against an independent count, its SAIH knobs and their bad values."""
import json

import pytest

from conftest import one_line_error
from cosmoflow_count import analytic_flops
from hpcai.errors import UsageError
from hpcai.workloads import catalog
from hpcai.workloads import cosmoflow as cf


@pytest.mark.parametrize("cube, width, depth", [(128, 1.0, 1), (32, 0.25, 1), (64, 0.5, 2), (256, 1.0, 1)])
def test_flops_per_sample_match_an_independent_count(cube, width, depth):
    # Through the FLOP model the declaration names, as the launcher would reach it.
    impl = catalog.get_workload("cosmoflow").impl(None)
    counted = impl.flops({"cube": cube, "width_mult": width, "depth_mult": depth})
    forward, train = analytic_flops(cube, width, depth)
    assert counted["forward_per_image"] == forward
    assert counted["train_per_image"] == train
    assert counted["train_bytes_per_image"] > 0


def test_the_paper_preset_is_mlperf_hpcs_model():
    torch = pytest.importorskip("torch")
    paper = catalog.get_workload("cosmoflow").presets["paper"]
    arch = cf.architecture(paper.params)
    assert paper.params["cube"] == 128 and paper.params["batch_size"] == 4
    assert arch["filters"] == [32, 64, 128, 256, 512] and arch["flat"] == 512 * 4 ** 3
    assert arch["fc_sizes"] == [128, 64] and arch["target_size"] == 4
    with torch.device("meta"):
        model = cf.build_model(arch)
    convs = [m for m in model if isinstance(m, torch.nn.Conv3d)]
    assert [c.kernel_size for c in convs] == [(3, 3, 3)] * 5 and all(c.padding == "same" for c in convs)
    assert sum(isinstance(m, torch.nn.MaxPool3d) for m in model) == 5
    assert all(m.negative_slope == 0.3 for m in model if isinstance(m, torch.nn.LeakyReLU))
    # Parameters as the reference Keras model.summary() counts them (kernels + biases).
    sizes = [4, 32, 64, 128, 256, 512]
    expected = sum(27 * a * b + b for a, b in zip(sizes, sizes[1:]))
    expected += sum(a * b + b for a, b in zip([32768, 128, 64], [128, 64, 4]))
    assert sum(p.numel() for p in model.parameters()) == expected
    assert catalog.get_workload("cosmoflow").presets["paper"].upstream.startswith("mlcommons/hpc@")


def test_the_model_regresses_four_parameters_within_the_scaled_tanh():
    torch = pytest.importorskip("torch")
    arch = cf.architecture({"cube": 32, "width_mult": 0.25, "depth_mult": 2})
    model = cf.build_model(arch).eval()
    out = model(torch.randn(3, 4, 32, 32, 32) * 100)
    assert out.shape == (3, 4) and out.abs().max() <= 1.2
    # depth 2: two convolutions before each pooling
    assert sum(isinstance(m, torch.nn.Conv3d) for m in model) == 10


@pytest.mark.parametrize("params, fragment", [
    ({"cube": 48}, "cube 48"),
    ({"cube": 16}, "cube 16"),
    ({"cube": "128"}, "cube '128'"),
    ({"width_mult": 0}, "width multiplier 0"),
    ({"width_mult": -1.0}, "width multiplier -1.0"),
    ({"depth_mult": 0}, "depth multiplier 0"),
    ({"depth_mult": 1.5}, "depth multiplier 1.5"),
    ({"dropout": 1.0}, "dropout 1.0"),
])
def test_a_spec_with_bad_knobs_is_refused_in_one_line(params, fragment):
    """A spec written by hand reaches the workload without the CLI's checks."""
    with pytest.raises(UsageError) as caught:
        cf.architecture({"cube": 128, **params})
    assert fragment in caught.value.one_line() and "\n" not in caught.value.one_line()


@pytest.mark.parametrize("args, fragment", [
    (("--cube", "96"), "'96' is not one of '64', '128', '256'"),
    (("--cube", "big"), "--cube"),
    (("--width-mult", "0"), "--width-mult"),
    (("--width-mult", "-2"), "--width-mult"),
    (("--depth-mult", "0"), "--depth-mult"),
    (("--depth-mult", "2.5"), "--depth-mult"),
])
def test_bad_knobs_on_the_command_line_are_refused_before_anything_is_set(fake_nvidia_node, args, fragment):
    node = fake_nvidia_node
    done = node.launch("cosmoflow", *args, "--device", "cpu", "--cap", "300", "-o", str(node.results))
    one_line_error(done, fragment)
    assert done.returncode == 2
    assert node.limits() == [700.0, 700.0] and all(d["set_log"] == [] for d in node.devices())
    assert node.journal_files() == [] and node.result_paths() == []


def test_the_knobs_land_in_the_spec_and_break_comparability(cpu_node):
    done = cpu_node.launch("cosmoflow", "--preset", "paper", "--cube", "256", "--width-mult", "2",
                           "--depth-mult", "2", "--channels-last", "--device", "cpu", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout.split("\ncommand: ")[0])
    params = spec["params"]
    assert (params["cube"], params["width_mult"], params["depth_mult"]) == (256, 2.0, 2)
    assert params["channels_last"] is True
    reasons = " ".join(spec["comparability"]["reasons"])
    assert "--cube 256 overrides the paper preset's 128" in reasons
    assert spec["comparability"]["upstream"].startswith("mlcommons/hpc@")


def test_cosmoflow_is_in_the_cv_image_family():
    assert "cosmoflow" in catalog.family_workloads("cv")
    assert catalog.get_workload("cosmoflow").unit == "samples"


def test_the_model_takes_the_channels_the_dataset_check_reads():
    """One channel count: the model's input and the shape `--data` is checked against
    (datasets.sample_shape) come from the same parameter."""
    from hpcai.workloads import datasets
    from hpcai.workloads.registry.cosmoflow import CosmoFlowParams

    params = {"cube": 64, "channels": 2}
    arch = cf.architecture(params)
    assert arch["channels"] == 2
    assert datasets.sample_shape("npy", CosmoFlowParams.from_dict(params))[0] == arch["channels"]
