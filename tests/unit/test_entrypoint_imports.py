"""The entrypoint and the image self-check share the version readers
(workloads/versions.py) instead of importing each other: no cycle, function-level
imports included."""
import ast
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def imported(module: str) -> set[str]:
    """Every hpcai module a workloads module imports, at any level."""
    tree = ast.parse((WORKLOADS / f"{module}.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("hpcai.")}


def test_selfcheck_and_the_entrypoint_do_not_import_each_other():
    assert "hpcai.workloads.entrypoint" not in imported("selfcheck")
    assert "hpcai.workloads.selfcheck" in imported("entrypoint")  # `check` runs it
    assert "hpcai.workloads.versions" in imported("selfcheck")
    assert not {"hpcai.workloads.entrypoint", "hpcai.workloads.selfcheck"} & imported("versions")


def test_the_version_readers_are_the_entrypoints():
    from hpcai.workloads import entrypoint, versions

    assert entrypoint.framework_versions is versions.framework_versions
