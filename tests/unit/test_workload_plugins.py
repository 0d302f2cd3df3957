"""Workloads from installed packages (issue 24 §4): the `hpcai.workloads`
entry-point group, a broken or doubled plugin a one-line error naming its
distribution; parameters as a dataclass on the declaration, presets checked
against it, the command's own options from its fields."""
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from conftest import LAUNCHER, ROOT
from hpcai.errors import UsageError
from hpcai.workloads import catalog
from hpcai.workloads.declaration import Impl, Preset, Workload
from hpcai.workloads.params import TrainParams, param


def fake_distribution(folder, name: str, module: str, source: str) -> None:
    """An installed distribution as pip leaves it: a module, and a dist-info
    folder whose entry_points.txt names it in the hpcai.workloads group."""
    (folder / f"{module}.py").write_text(source)
    info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hpcai.workloads]\n{name} = {module}\n")


def launch_list(folder):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([*LAUNCHER, "list"], capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.mark.parametrize("source, says", [
    ("import no_such_framework_here\n", "ModuleNotFoundError: No module named 'no_such_framework_here'"),
    ("WORKLOAD = 42\n", "holds no WORKLOAD = Workload(...)"),
    ("from hpcai.workloads.registry.resnet50 import WORKLOAD\n",
     "declares workload 'resnet50', which another workload already declares"),
])
def test_a_broken_or_doubled_plugin_is_one_line_naming_its_distribution(tmp_path, source, says):
    fake_distribution(tmp_path, "centre-bench", "centre_bench", source)
    done = launch_list(tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "workload plugin 'centre-bench' (distribution 'centre-bench')" in done.stderr
    assert says in done.stderr


def test_power_restore_still_runs_while_a_plugin_is_broken(tmp_path):
    """Limits left by a crash must come back even with a broken package installed:
    `power` commands do not load plugins' errors; every other command refuses."""
    fake_distribution(tmp_path, "centre-bench", "centre_bench", "import no_such_framework_here\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "HPCAI_STATE_DIR": str(tmp_path / "state")}
    restore = subprocess.run([*LAUNCHER, "power", "restore"], capture_output=True, text=True,
                             cwd=ROOT, env=env)
    assert restore.returncode == 0, restore.stderr
    assert "nothing to restore" in restore.stdout + restore.stderr
    assert "centre-bench" not in restore.stderr
    assert launch_list(tmp_path).returncode == 2


def test_a_preset_setting_no_field_is_refused_when_declared():
    with pytest.raises(UsageError, match="unknown parameter image_sise"):
        Workload("w", "a workload", "images", {"pytorch": Impl("w", "torch")}, params=TrainParams,
                 presets={"tiny": Preset("tiny", "tiny", params={"image_sise": 64}, protocol={})})


@dataclass(frozen=True)
class SizedParams(TrainParams):
    edge: int = param(64, flag="--edge", type="int", choices=(32, 64), help="edge in pixels")
    scale: float = param(1.0, flag="--scale", type="float", min=0, min_open=True, help="scale")
    depth: int = 3  # no flag: no option


def test_options_come_from_the_params_fields_and_defaults_are_written_once():
    workload = Workload("w", "a workload", "images", {"pytorch": Impl("mine.w", "torch")},
                        params=SizedParams)
    assert [(o.flag, o.param, o.type, o.choices, o.min, o.min_open) for o in workload.options] == [
        ("--edge", "edge", "int", (32, 64), None, False), ("--scale", "scale", "float", (), 0, True)]
    # A spec's params: None and missing take the field's default; other workloads' keys are ignored.
    typed = SizedParams.from_spec({"params": {"edge": 32, "scale": None, "cube": 128}})
    assert (typed.edge, typed.scale, typed.depth, typed.precision) == (32, 1.0, 3, "auto")
    # A dotted module is the plugin's own; a bare one hpcai's.
    assert workload.impl(None).module_path == "mine.w"
    assert catalog.get_workload("resnet50").impl(None).module_path == "hpcai.workloads.resnet50"


def test_every_builtin_workload_declares_params_in_run_and_its_options_once():
    for workload in catalog.WORKLOADS.values():
        assert workload.params is not TrainParams and workload.params.__name__.endswith("Params")
        assert all(impl.in_run in ("epochs", "waves") for impl in workload.impls.values())
        flags = [o.flag for o in workload.options]
        assert len(flags) == len(set(flags))
    assert catalog.get_workload("llama3-8b-inference").impl(None).in_run == "waves"
    assert [o.flag for o in catalog.get_workload("cosmoflow").options] == \
        ["--cube", "--width-mult", "--depth-mult"]


def test_reading_a_plugin_declaration_imports_no_framework():
    code = ("import sys; sys.path.insert(0, 'examples/plugin-workload/src'); "
            "import hpcai_example_mlp.declaration as d; assert d.WORKLOAD.options; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'litgpt', 'sglang') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_data_from_storage_needs_the_fields_its_shape_is_made_of():
    """A workload that reads --data declares the params its samples' shape comes from."""
    with pytest.raises(UsageError, match="data_format npy: unknown parameter channels"):
        Workload("w", "a workload", "samples", {"pytorch": Impl("w", "torch")}, params=TrainParams,
                 data_format="npy")
