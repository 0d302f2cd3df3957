"""A workload is one place (issue 18 §1): each declares itself in one module
of hpcai.workloads.registry, which the catalog discovers without importing a
framework; a generic option a workload does not honour is refused in one line,
never recorded as if applied."""
import importlib
import json
import pkgutil
import subprocess
import sys

import click
import click.testing
import pytest

from conftest import one_line_error
from hpcai.workloads import catalog, registry
from hpcai.workloads.declaration import GENERIC_OPTIONS, Workload


def test_the_catalog_is_every_registry_module_and_nothing_else():
    modules = [m.name for m in pkgutil.iter_modules(registry.__path__) if not m.name.startswith("_")]
    declared = [importlib.import_module(f"hpcai.workloads.registry.{m}").WORKLOAD
                for m in modules]
    assert all(isinstance(w, Workload) for w in declared)
    assert sorted([*catalog.WORKLOADS, *catalog.COMMAND_WORKLOADS]) == sorted(w.name for w in declared)
    # exec (the user's command) is no benchmark: reached by name and its own command only.
    assert list(catalog.COMMAND_WORKLOADS) == ["exec"] and catalog.get_workload("exec").kind == "command"
    # The order `list` and the image families have always used.
    before = ["resnet50", "vit-l16", "sd2", "llama3-8b-pretrain", "llama3-8b-inference"]
    assert [name for name in catalog.WORKLOADS if name in before] == before


def test_the_catalogs_old_names_still_resolve():
    """Other code imports LLAMA3_8B_INFERENCE and friends from the catalog."""
    assert catalog.LLAMA3_8B_INFERENCE is catalog.get_workload("llama3-8b-inference")
    assert catalog.RESNET50_PAPER is catalog.get_workload("resnet50").presets["paper"]
    with pytest.raises(AttributeError):
        catalog.NO_SUCH_WORKLOAD  # noqa: B018


def test_a_doubly_declared_workload_is_refused(monkeypatch):
    import importlib

    resnet = importlib.import_module("hpcai.workloads.registry.resnet50")
    monkeypatch.setattr(importlib.import_module("hpcai.workloads.registry.vit_l16"), "WORKLOAD", resnet.WORKLOAD)
    with pytest.raises(TypeError, match="declared twice.*resnet50"):
        catalog.discover()


def test_reading_the_catalog_imports_no_framework():
    code = ("import sys; from hpcai.workloads import catalog; catalog.get_workload('resnet50'); "
            "print(sorted(m for m in ('torch', 'tensorflow', 'litgpt', 'sglang') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_implementation_declares_only_known_generic_options():
    for workload in catalog.WORKLOADS.values():
        for impl in workload.impls.values():
            assert set(impl.honours) <= set(GENERIC_OPTIONS), (workload.name, impl.honours)


@pytest.mark.parametrize("args, flag", [
    (("llama3-8b-inference", "--compile"), "--compile"),
    (("llama3-8b-inference", "--precision", "fp32"), "--precision"),
    (("vit-l16", "--channels-last"), "--channels-last"),
    (("resnet50", "--impl", "tensorflow", "--channels-last"), "--channels-last"),
    (("llama3-8b-pretrain", "--channels-last"), "--channels-last"),
])
def test_a_generic_option_the_workload_ignores_is_refused(fake_nvidia_node, args, flag):
    node = fake_nvidia_node
    done = node.launch(*args, "--device", "cpu", "--cap", "300", "-o", str(node.results))
    one_line_error(done, f"does not honour {flag}", "drop it")
    # Refused before anything was set or written.
    assert node.limits() == [700.0, 700.0] and all(d["set_log"] == [] for d in node.devices())
    assert node.journal_files() == [] and node.result_paths() == []


def test_a_generic_option_the_workload_honours_is_recorded(cpu_node):
    done = cpu_node.launch("resnet50", "--device", "cpu", "--channels-last", "--compile", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout.split("\ncommand: ")[0])
    assert spec["params"]["channels_last"] is True and spec["params"]["compile"] is True
    assert {"channels_last", "compile"} <= set(spec["overridden"])


def test_a_presets_setting_the_implementation_ignores_is_not_recorded(cpu_node):
    """The fast preset asks for channels-last; TensorFlow's ResNet-50 has no such
    switch, so its spec must not say channels_last: true."""
    done = cpu_node.launch("resnet50", "--impl", "tensorflow", "--preset", "fast", "--device", "cpu",
                           "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    params = json.loads(done.stdout.split("\ncommand: ")[0])["params"]
    assert "channels_last" not in params and params["compile"] is True


def test_every_declared_unit_is_one_the_result_schema_and_the_report_know(result_schema):
    from hpcai.launcher.report.efficiency import DEFAULT_WORK
    from hpcai.launcher.report.tables import UNIT_TITLES

    props = result_schema["properties"]
    # The benchmarks' units are named; exec's (solutions, or its --units) match a pattern.
    work_units, rates = (props[key]["properties"]["unit"]["anyOf"] for key in ("work", "throughput"))
    for workload in catalog.WORKLOADS.values():
        assert workload.unit in work_units[0]["enum"]
        rate = f"{workload.unit}/s"
        assert rate in rates[0]["enum"]
        assert rate in DEFAULT_WORK and rate in UNIT_TITLES


def test_a_declared_option_range_and_int_choices_reach_the_command_line():
    """Option(min=..., choices=...) become click types: bad values are refused by the
    CLI before a run, and an int choice is stored as an int."""
    from hpcai.launcher.cli.hpcai_launch import _workload_option
    from hpcai.workloads.declaration import Option

    @click.command()
    @_workload_option(Option("--cube", "cube", "edge", type="int", choices=(64, 128)))
    @_workload_option(Option("--width", "width", "multiplier", type="float", min=0, min_open=True))
    def command(**params):
        click.echo(json.dumps(params))

    runner = click.testing.CliRunner()
    done = runner.invoke(command, ["--cube", "128", "--width", "0.5"])
    assert done.exit_code == 0 and json.loads(done.output) == {"cube": 128, "width": 0.5}
    assert runner.invoke(command, ["--cube", "96"]).exit_code == 2
    assert runner.invoke(command, ["--width", "0"]).exit_code == 2


def test_a_paper_preset_names_its_own_upstream():
    from dataclasses import replace

    from hpcai.launcher.run.comparability import assess
    from hpcai.workloads.declaration import UPSTREAM

    workload = catalog.get_workload("resnet50")
    paper = workload.presets["paper"]
    args = dict(impl="pytorch", params=paper.params, preset_params=paper.params, protocol=paper.protocol,
                device_type="cuda", gpus=1)
    assert assess(workload, paper, **args)["upstream"] == UPSTREAM
    other = replace(paper, upstream="mlcommons/hpc@0000000")
    assert assess(workload, other, **args)["upstream"] == "mlcommons/hpc@0000000"
