"""The layering contract, read from the source with `ast`:

- the launcher's modules (hpcai.launcher) never import a framework: it runs on
  login nodes and in `--help`, where torch and friends are absent or slow;
- hpcai.measure (telemetry, node power, validity, statistics) imports neither
  the launcher nor a framework: the workload and the launcher both build on it;
- no import cycles among hpcai's modules.

Module-level and function-level imports both count: a lazy import still makes
the arrow. import-linter was considered, but its graph builder does not follow
pyproject's package-dir mapping (hpcai.launcher lives in launcher/,
hpcai.workloads in workloads/), so this test maps folders to packages itself.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ("torch", "torchvision", "tensorflow", "lightning", "litgpt", "sglang",
              "diffusers", "transformers")


def package_dirs(root: Path) -> dict[str, Path]:
    """Package name -> folder, as pyproject's [tool.setuptools] package-dir says."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"].get("package-dir") or {}
    found = {name: root / folder for name, folder in mapping.items() if name}
    return found or {"hpcai": root / "hpcai"}


class ImportGraph:
    """Every module under the mapped folders and the modules each one imports
    (`imports[m]` holds (imported name, line) pairs, hpcai's and others')."""

    def __init__(self, root: Path):
        self.modules: dict[str, Path] = {}
        folders = sorted(package_dirs(root).items(), key=lambda item: -len(str(item[1])))
        for package, folder in folders:
            for path in sorted(folder.rglob("*.py")):
                name = self._name(path, folder, package)
                self.modules.setdefault(name, path)
        self.imports = {name: self._imports(name, path) for name, path in self.modules.items()}

    @staticmethod
    def _name(path: Path, folder: Path, package: str) -> str:
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join([package, *parts])

    def is_package(self, name: str) -> bool:
        return self.modules.get(name, Path()).name == "__init__.py"

    def _imports(self, module: str, path: Path) -> list[tuple[str, int]]:
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(module, node.module or "", node.level)
                found.append((base, node.lineno))
                found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
        return found

    def _absolute(self, module: str, name: str, level: int) -> str:
        if not level:
            return name
        base = module.split(".")
        if not self.is_package(module):
            base = base[:-1]
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([name] if name else []))

    def resolve(self, name: str) -> str | None:
        """The hpcai module an imported name lives in (`pkg.mod.func` -> `pkg.mod`)."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None

    def edges(self, module: str) -> dict[str, int]:
        """hpcai modules `module` imports -> the line; a package's own __init__ is
        not counted from inside it (importing a submodule always runs it)."""
        out: dict[str, int] = {}
        for name, line in self.imports[module]:
            target = self.resolve(name)
            if target and target != module and not (
                    self.is_package(target) and module.startswith(target + ".")):
                out.setdefault(target, line)
        return out

    def in_package(self, package: str) -> list[str]:
        return sorted(m for m in self.modules if m == package or m.startswith(package + "."))

    def cycles(self) -> list[list[str]]:
        """Strongly connected components with more than one module (Tarjan, iterative)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack, on_stack, found = [], set(), []
        for start in self.modules:
            if start in index:
                continue
            work = [(start, iter(self.edges(start)))]
            index[start] = low[start] = len(index)
            stack.append(start)
            on_stack.add(start)
            while work:
                node, children = work[-1]
                child = next(children, None)
                if child is not None:
                    if child not in index:
                        index[child] = low[child] = len(index)
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(self.edges(child))))
                    elif child in on_stack:
                        low[node] = min(low[node], index[child])
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
        return found

    def chain(self, start: str, goal) -> list[str] | None:
        """The shortest import chain from `start` to a module `goal(name)` accepts
        (hpcai modules only), for a failure message that names every arrow."""
        previous: dict[str, str | None] = {start: None}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for target in self.edges(node):
                if goal(target):  # the start itself, for a cycle
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return path[::-1] + [target]
                if target not in previous:
                    previous[target] = node
                    queue.append(target)
        return None

    def describe(self, path: list[str]) -> str:
        arrows = [f"{a} (line {self.edges(a)[b]})" for a, b in zip(path, path[1:])]
        return " -> ".join(arrows + [path[-1]])


def external_imports(graph: ImportGraph, package: str, forbidden) -> list[str]:
    """`module (line N) -> framework` for every import of a forbidden top-level name."""
    bad = []
    for module in graph.in_package(package):
        for name, line in graph.imports[module]:
            if name.split(".")[0] in forbidden:
                bad.append(f"{module} (line {line}) -> {name}")
    return sorted(set(bad))


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(ROOT)


def test_the_graph_sees_every_part(graph):
    """The mapping works: the launcher's and the workloads' folders are read, with
    function-level imports (run/plan.py imports the power journal inside a function)."""
    assert "hpcai.launcher.run.launch" in graph.modules
    assert "hpcai.workloads.catalog" in graph.modules
    assert "hpcai.launcher.power.journal" in graph.edges("hpcai.launcher.run.plan")


def test_the_launcher_never_imports_a_framework(graph):
    bad = external_imports(graph, "hpcai.launcher", FRAMEWORKS)
    assert not bad, "the launcher imports a framework: " + "; ".join(bad)


def test_measure_imports_neither_the_launcher_nor_a_framework(graph):
    """The measurement core, which both sides import, stays below both."""
    modules = graph.in_package("hpcai.measure")
    bad = external_imports(graph, "hpcai.measure", FRAMEWORKS)
    for module in modules:
        path = graph.chain(module, lambda name: name.startswith("hpcai.launcher"))
        if path is not None:
            bad.append(graph.describe(path))
    assert not bad, "hpcai.measure imports upward or a framework: " + "; ".join(bad)


def test_no_import_cycles(graph):
    found = graph.cycles()
    messages = []
    for component in found:
        members = set(component)
        start = component[0]
        loop = graph.chain(start, lambda name, start=start: name == start) or [start]
        # The chain back to the start stays inside the component, by construction.
        assert set(loop) <= members
        messages.append(graph.describe(loop))
    assert not messages, "import cycle(s): " + "; ".join(messages)


def test_a_cycle_is_found_and_named(tmp_path):
    """The checker itself: a two-module loop, one import inside a function."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"hpcai" = "pkg"\n')
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from hpcai import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from hpcai.a import x\n")
    (tmp_path / "pkg" / "c.py").write_text("import torch.nn\n")
    small = ImportGraph(tmp_path)
    assert small.cycles() == [["hpcai.a", "hpcai.b"]]
    assert small.describe(small.chain("hpcai.a", lambda n: n == "hpcai.a")) == \
        "hpcai.a (line 1) -> hpcai.b (line 2) -> hpcai.a"
    assert external_imports(small, "hpcai", FRAMEWORKS) == ["hpcai.c (line 1) -> torch.nn"]
