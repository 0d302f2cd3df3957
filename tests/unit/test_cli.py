"""The CLI's contract: fast help, one-line errors, nothing changed on bad input.
GPU state comes from the FAKE pynvml (tests/fakes) in the fake_nvidia_node fixture."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT, one_line_error


def test_help_imports_no_framework_or_validator():
    code = ("import sys; from hpcai.launcher.cli.hpcai_launch import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'jsonschema', 'pynvml', 'amdsmi', 'numpy') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert "Power-aware AI benchmarks" in out
    assert out.strip().endswith("HEAVY []")


def test_list_shows_workloads_and_presets(cpu_node):
    done = cpu_node.launch("list")
    assert done.returncode == 0
    assert "resnet50" in done.stdout and "paper" in done.stdout and "tiny" in done.stdout
    # Which preset is comparable to the seed paper, and which is hpcai's best.
    lines = done.stdout.splitlines()
    from hpcai.workloads.catalog import WORKLOADS

    seed_paper = [w for w in WORKLOADS.values() if not w.presets["paper"].upstream]
    assert len(seed_paper) == 5
    assert sum("paper  (comparable to the seed paper)" in line for line in lines) == len(seed_paper)
    assert sum("fast   (hpcai's best configuration)" in line for line in lines) == len(WORKLOADS)
    # A paper preset whose reference is another (MLPerf HPC's) says so.
    for workload in WORKLOADS.values():
        if workload.presets["paper"].upstream:
            assert f"paper  (comparable to its reference, {workload.presets['paper'].upstream})" in done.stdout


@pytest.mark.parametrize("args,fragments", [
    (["resnet5"], ["unknown workload", "resnet50"]),
    (["resnet50", "--preset", "huge"], ["'huge' is not one of", "--help"]),
    (["resnet50", "--cap", "lots"], ["not a number of watts"]),
    (["resnet50", "--cap", "0"], ["positive number of watts"]),
    (["resnet50", "--site", "atlantis"], ["unknown site 'atlantis'"]),
    (["resnet50", "--epochs", "0"], ["--epochs"]),
])
def test_bad_input_is_one_line_and_non_zero(cpu_node, args, fragments):
    one_line_error(cpu_node.launch(*args, "-o", str(cpu_node.results)), *fragments)
    assert not cpu_node.results.exists()


def test_cap_without_gpus_is_refused(cpu_node):
    one_line_error(cpu_node.launch("resnet50", "--cap", "300"), "--cap needs GPUs")


def test_unwritable_output_folder(cpu_node, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line_error(cpu_node.launch("resnet50", "--preset", "tiny", "-o", str(blocker / "x")),
                   "cannot write to output folder", "--output")


def test_invalid_site_file(cpu_node, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[power]\nmethod = "telepathy"\n')
    one_line_error(cpu_node.launch("resnet50", "--site", str(bad)), "invalid site file",
                   "power.method")


def test_cap_outside_the_gpu_range_changes_nothing(fake_nvidia_node):
    node = fake_nvidia_node
    before = node.limits()
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "150",
                       "-o", str(node.results))
    one_line_error(done, "150 W is outside GPU 0's range 200-700 W", "pick a cap between 200 and 700 W")
    assert node.limits() == before and node.journal_files() == []
    assert all(d["set_log"] == [] for d in node.devices())


def test_no_permission_to_set_caps_changes_nothing(fake_nvidia_node):
    node = fake_nvidia_node
    node.update(0, deny_set=True)
    node.update(1, deny_set=True)
    before = node.limits()
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "300",
                       "-o", str(node.results))
    one_line_error(done, "root")
    assert node.limits() == before and node.journal_files() == []


def test_cap_that_does_not_take_is_an_error_and_restored(fake_nvidia_node):
    node = fake_nvidia_node
    node.update(1, ignore_set=True)
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "300",
                       "-o", str(node.results))
    one_line_error(done, "300")
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []


def test_dry_run_checks_the_cap_range_but_sets_nothing(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--device", "cpu", "--cap", "300", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout.split("\ncommand: ")[0])
    assert spec["power"]["cap_w"] == 300.0 and spec["devices"]["gpu_indices"] == [0, 1]
    assert "torch.distributed.run" in done.stdout
    assert all(d["set_log"] == [] for d in node.devices())
    one_line_error(node.launch("resnet50", "--device", "cpu", "--cap", "900", "--dry-run", "--json"),
                   "outside GPU 0's range")


def test_info_and_power_show_on_a_gpu_node(fake_nvidia_node):
    info = fake_nvidia_node.launch("info", "--json")
    assert info.returncode == 0, info.stderr
    facts = json.loads(info.stdout)
    assert facts["vendor"] == "nvidia" and len(facts["gpus"]) == 2
    assert facts["power_method"] == "nvml" and facts["site"]["name"] == "default"
    show = fake_nvidia_node.launch("power", "show")
    assert show.returncode == 0, show.stderr
    assert "NVIDIA H100" in show.stdout and "700 W" in show.stdout and "200 W" in show.stdout


def test_power_restore_without_a_journal_is_not_an_error(fake_nvidia_node):
    done = fake_nvidia_node.launch("power", "restore")
    assert done.returncode == 0 and "nothing to restore" in done.stdout
