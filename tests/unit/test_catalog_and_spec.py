import pytest

from hpcai.errors import UsageError
from hpcai.launcher.run.spec import build_spec
from hpcai.workloads.catalog import get_workload


def spec(**kw):
    args = dict(impl="pytorch", overrides={}, protocol_overrides={}, device_type="cpu", vendor=None, nproc=2,
                gpu_indices=None, cap_w=None, power_method="auto", cap_tolerance_frac=0.05,
                node_overhead_w=100.0, site={"name": "default"}, output_dir="/tmp/x",
                runtime={"kind": "host"})
    args.update(kw)
    return build_spec(get_workload("resnet50"), kw.pop("preset", "paper"), **args).to_json()


def test_paper_preset_follows_the_seed_paper_protocol():
    s = spec()
    assert s["protocol"]["warmup_epochs"] == 1 and s["protocol"]["epochs"] == 10
    assert s["protocol"]["sample_interval_s"] == 0.1
    assert s["params"]["image_size"] == 224


def test_overrides_win_and_none_means_keep_the_preset():
    s = spec(overrides={"batch_size": 32, "precision": None},
             protocol_overrides={"epochs": 3, "steps_per_epoch": None})
    assert s["params"]["batch_size"] == 32 and s["params"]["precision"] == "32-true"
    assert s["protocol"]["epochs"] == 3 and s["protocol"]["steps_per_epoch"] == 50


def test_run_id_names_workload_preset_and_cap():
    assert spec(cap_w=300.0)["run_id"].endswith("-resnet50-paper-cap300W")


@pytest.mark.parametrize("name", ["resnet", "ResNet50", ""])
def test_unknown_workload_is_a_usage_error(name):
    with pytest.raises(UsageError, match="unknown workload"):
        get_workload(name)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(UsageError) as err:
        get_workload("resnet50").preset("huge")
    assert "paper, fast, short, tiny" in err.value.one_line()


def test_zero_measured_epochs_is_refused():
    with pytest.raises(UsageError, match="--epochs must be at least 1"):
        spec(protocol_overrides={"epochs": 0})
