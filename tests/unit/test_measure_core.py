"""The measurement core (hpcai/measure): one t quantile, one RAPL counter rule,
one GPU name matcher, and no import of the launcher or of a framework."""
import ast
import math
import statistics
from pathlib import Path

import pytest

from hpcai.measure import adaptive, gpu_names, node_power, power_sources, rapl
from hpcai.measure.pm_counters import PmCountersSource
from hpcai.measure.source import PowerSource
from hpcai.measure.stats import relative_half_width, t95, throughput_stats
from hpcai.workloads.declaration import Preset

MEASURE = Path(__file__).resolve().parents[2] / "hpcai" / "measure"

# Two-sided 95% values of Student's t (column 0.975) from the NIST/SEMATECH
# e-Handbook of Statistical Methods, 1.3.6.7.2 "Critical Values of the Student's t
# Distribution" (3 decimals; rows 1-100, then infinity: 1.960).
PUBLISHED = {1: 12.706, 2: 4.303, 10: 2.228, 20: 2.086, 21: 2.080, 24: 2.064, 29: 2.045,
             30: 2.042, 31: 2.040, 40: 2.021, 45: 2.014, 60: 2.000, 75: 1.992, 100: 1.984,
             10 ** 6: 1.960}


@pytest.mark.parametrize("dof,value", sorted(PUBLISHED.items()))
def test_t95_is_students_t_to_three_decimals(dof, value):
    assert t95(dof) == pytest.approx(value, abs=5e-4)


def test_t95_falls_steadily_towards_the_normal_quantile_past_the_table():
    values = [t95(d) for d in range(1, 2000)]
    assert all(a > b for a, b in zip(values, values[1:]))
    assert values[-1] > 1.95996 and t95(31) == pytest.approx(2.0395, abs=5e-4)


def test_the_interval_of_25_epochs_uses_students_t_with_24_dof():
    """The old result rule used z = 1.96 above 20 dof: 5% too narrow here."""
    values = [100.0 + (i % 5) - 2 for i in range(25)]
    stats = throughput_stats(values)
    half = (stats["ci95"][1] - stats["ci95"][0]) / 2
    expected = 2.0639 * statistics.stdev(values) / math.sqrt(25)
    assert half == pytest.approx(expected, rel=1e-4)
    assert half > 1.96 * statistics.stdev(values) / math.sqrt(25) * 1.04


def test_the_adaptive_window_and_the_result_share_the_interval():
    values = [10.0 + 0.1 * (i % 7) for i in range(40)]
    stats = throughput_stats(values)
    half = (stats["ci95"][1] - stats["ci95"][0]) / 2
    assert relative_half_width(values) == pytest.approx(half / stats["mean"])
    assert adaptive.relative_half_width is relative_half_width


def zone(root: Path, name: str, label: str, range_uj: int, uj: int) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(f"{label}\n")
    (path / "max_energy_range_uj").write_text(f"{range_uj}\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    return path


def test_one_rapl_counter_wraps_at_max_energy_range_for_both_readers(tmp_path):
    """The sampler's CPU package and the node power source read one counter rule:
    a drop of energy_uj is a wrap at max_energy_range_uj (kernel powercap docs)."""
    root = tmp_path / "powercap"
    path = zone(root, "intel-rapl:0", "package-0", 10_000_000, 9_000_000)
    domains, why = power_sources.find_rapl_domains(root)
    source = rapl.RaplSource(root)
    assert why is None and source.read().energy_j == {"package-0": 0.0}
    (path / "energy_uj").write_text("500000\n")  # 1 J to the top, then 0.5 J
    assert domains[0].read().energy_j == pytest.approx(1.5)
    assert source.read().energy_j["package-0"] == pytest.approx(1.5)
    assert source.take_backwards() == set()


def test_one_rapl_counter_calls_an_implausible_drop_backwards_for_both_readers(tmp_path):
    root = tmp_path / "powercap"
    path = zone(root, "intel-rapl:0", "package-0", 262_143_328_850, 50_000_000)
    domains, _ = power_sources.find_rapl_domains(root)
    source = rapl.RaplSource(root, max_power_w=1000)
    source.read()
    (path / "energy_uj").write_text("40000000\n")  # a wrap would be ~262 kJ at once
    reading = domains[0].read()
    assert reading.energy_j == 0.0 and reading.power_w is None
    assert source.read().energy_j["package-0"] == 0.0
    assert source.take_backwards() == {"package-0"} and source.take_backwards() == set()


@pytest.mark.parametrize("key,name,expected", [
    ("H100", "NVIDIA H100 80GB HBM3", True),  # the preset rule's case
    ("H100", "NVIDIA H100-SXM5-80GB", True),
    ("h100", "nvidia  H100 PCIe", True),  # case and spacing aside
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", True),  # the device table's: whole name
    ("MI300X", "AMD Instinct MI300X", True),
    ("A100", "NVIDIA A100-SXM4-80GB", True),
    ("A10", "NVIDIA A100-SXM4-80GB", False),  # a substring rule said yes
    ("H100", "NVIDIA GH100", False),
    ("L4", "NVIDIA L40S", False),
    ("MI250", "AMD Instinct MI250X", False),
    ("H100", None, False), ("", "NVIDIA H100", False),
])
def test_gpu_names_match_as_whole_words(key, name, expected):
    assert gpu_names.matches(key, name) is expected


def test_a_presets_gpu_settings_follow_the_matcher():
    preset = Preset(name="p", summary="test", params={"batch_size": 64}, protocol={},
                    by_gpu={"A10": {"batch_size": 8}, "amd": {"batch_size": 32}})
    assert preset.resolve("NVIDIA A10", "nvidia")["batch_size"] == 8
    assert preset.resolve("NVIDIA A100-SXM4-80GB", "nvidia")["batch_size"] == 64
    assert preset.resolve("AMD Instinct MI300X", "amd")["batch_size"] == 32


FORBIDDEN = ("hpcai.launcher", "torch", "torchvision", "tensorflow", "lightning", "litgpt", "sglang",
             "keras", "jax")


def imported_modules(tree: ast.AST) -> list[str]:
    """Every module an import statement names, at any depth (function-level too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant):
            found.append(str(node.args[0].value))
    return found


def test_the_core_imports_neither_the_launcher_nor_a_framework():
    files = sorted(MEASURE.rglob("*.py"))
    assert len(files) >= 10
    offenders = []
    for path in files:
        for name in imported_modules(ast.parse(path.read_text(), str(path))):
            if name.startswith("hpcai.workloads") or any(
                    name == f or name.startswith(f + ".") for f in FORBIDDEN):
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_the_layering_walk_sees_function_level_imports():
    tree = ast.parse("def f():\n    from hpcai.launcher import run\n    import torch.nn\n"
                     "    importlib.import_module('sglang')\n")
    assert set(imported_modules(tree)) >= {"hpcai.launcher", "torch.nn", "sglang"}


def test_the_core_has_no_import_cycle_and_every_node_source_is_a_power_source():
    """The concrete sources import the base (source.py), never node_power.py,
    which opens them by kind: the old node_power <-> ipmi <-> redfish cycle."""
    graph = {}
    for path in MEASURE.glob("*.py"):
        module = f"hpcai.measure.{path.stem}"
        names = imported_modules(ast.parse(path.read_text()))
        graph[module] = {n for n in names if n.startswith("hpcai.measure.") and n != module}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n)))
                   for n in graph.get(start, ()))

    assert [m for m in graph if reaches(m, m)] == []
    for opener in node_power.OPENERS.values():
        made = opener if isinstance(opener, type) else None
        if made is not None:
            assert issubclass(made, PowerSource)
    assert issubclass(rapl.RaplSource, PowerSource) and issubclass(PmCountersSource, PowerSource)
    assert set(node_power.OPENERS) == {"rapl", "pm_counters", "ipmi", "redfish"}
