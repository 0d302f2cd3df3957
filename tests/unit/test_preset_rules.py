"""Presets own their protocol settings (issue 39 §2): adaptive-window settings are
declared by each preset (Preset.windows), never matched by the preset's name in the
measurement core; preset values are checked against their params' field types when
the declaration is made; a user caps the settle phase with --settle-max-s (issue 43)."""
from __future__ import annotations

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.errors import UsageError
from hpcai.launcher.sweep import inrun
from hpcai.launcher.run import plan as planning
from hpcai.launcher.run.options import Options
from hpcai.measure import adaptive
from hpcai.workloads import catalog
from hpcai.workloads.declaration import CPU_SHORT_WINDOWS, CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.params import TrainParams


def _workload(**preset_kw) -> Workload:
    return Workload(name="probe", summary="probe", unit="items",
                    impls={"pytorch": Impl("resnet50", "torch")}, params=TrainParams,
                    presets={"tiny": Preset("tiny", "tiny", params={"batch_size": 4},
                                            protocol={}, **preset_kw)})


def test_a_preset_called_tiny_gets_the_default_windows_unless_it_declares_its_own():
    # Before: any preset named `tiny` got 1 s windows, whatever its workload meant by it.
    undeclared = _workload().presets["tiny"]
    filled = adaptive.resolve_protocol({"ci_target": 0.02}, undeclared.windows)
    assert filled["min_window_s"] == adaptive.WINDOW_DEFAULTS["min_window_s"] == 30.0
    declared = _workload(windows={"min_window_s": 4.0}).presets["tiny"]
    assert adaptive.resolve_protocol({"ci_target": 0.02}, declared.windows)["min_window_s"] == 4.0


def test_hpcais_quick_presets_declare_their_windows_and_the_catalog_hands_them_out():
    for workload in catalog.WORKLOADS.values():
        for name, preset in workload.presets.items():
            expected = {"tiny": CPU_TINY_WINDOWS, "short": CPU_SHORT_WINDOWS}.get(name, {})
            assert preset.windows == expected, (workload.name, name)
    assert catalog.preset_windows("resnet50", "tiny") == CPU_TINY_WINDOWS
    assert catalog.preset_windows("resnet50", "paper") == {}


@pytest.mark.parametrize("windows, says", [
    ({"min_windw_s": 1.0}, "'min_windw_s' is no window setting"),
    ({"ci_target": 0.1}, "'ci_target' is no window setting"),
    ({"settle_max_s": -3}, "settle_max_s = -3 is not a positive number"),
    ({"block_s": float("nan")}, "block_s = nan is not a positive number"),
    ({"block_s": True}, "block_s = True is not a positive number"),
])
def test_a_preset_with_bad_windows_is_refused_where_it_is_declared(windows, says):
    with pytest.raises(UsageError) as refused:
        _workload(windows=windows)
    assert says in str(refused.value)


@pytest.mark.parametrize("params, says", [
    ({"batch_search_start": "256"}, "batch_search_start = '256' is not int"),
    ({"compile": 1}, "compile = 1 is not bool"),
    ({"lr": "1e-4"}, "lr = '1e-4' is not float"),
])
def test_a_preset_value_of_the_wrong_type_is_refused_at_import(params, says):
    with pytest.raises(UsageError) as refused:
        Workload(name="probe", summary="probe", unit="items",
                 impls={"pytorch": Impl("resnet50", "torch")}, params=TrainParams,
                 presets={"p": Preset("p", "p", params=params, protocol={})})
    assert says in str(refused.value)


def test_right_types_pass_and_an_int_is_a_float():
    TrainParams.check({"lr": 1, "compile": True, "batch_size": "auto", "optimizer": None}, "here")


def test_settle_max_s_reaches_the_in_run_process_protocol(tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    monkeypatch.setenv("HPCAI_STATE_DIR", str(tmp_path / "state"))
    opts = Options(workload="resnet50", preset="paper", device="cpu", runtime="host", nproc=1,
                   output=str(tmp_path / "results"), protocol={"epochs": 2, "settle_max_s": 7.5})
    process = inrun.process_plan(planning.make_plan(opts), 2)
    protocol = process.spec.protocol.to_json()
    assert protocol["settle_max_s"] == 7.5  # the user's, over the default 120 s
    assert protocol["settle_window_s"] == adaptive.WINDOW_DEFAULTS["settle_window_s"]
