"""hpcai's install hints name what works (issue 41, item 1): `hpcai` on the package
index is another project, so no message or page may send a user to
`pip install 'hpcai[...]'`; the hints name the checkout's extras, which exist."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from hpcai.install import DISTRIBUTION, install_hint

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The product (what a user runs and reads), its docs, and the definitions that build images.
PRODUCT = ("hpcai", "launcher", "workloads", "site", "definitions", "docs", "examples", "tools")
# `pip install hpcai[x]`, 'hpcai[x]', "hpcai[x]", `hpcai[x]` or a bare hpcai: an install of the index's project.
INDEX_INSTALL = re.compile(r"pip install\s+(?:--?[\w-]+\s+)*['\"]?hpcai(?:\[|['\"\s]|$)", re.M)
EXTRA_REF = re.compile(r"\bhpcai\[[\w,]+\]")


def product_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Makefile"]
    for top in PRODUCT:
        files += [p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".sh", ".def", ".toml", ".txt"}]
    return files


def test_the_distribution_is_not_the_package_index_s_hpcai():
    assert PYPROJECT["project"]["name"] == DISTRIBUTION != "hpcai"
    # The import package and the command keep their names.
    assert PYPROJECT["project"]["scripts"]["hpcai-launch"] == "hpcai.launcher.cli:main"


def test_no_message_or_page_installs_hpcai_from_the_package_index():
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in product_files()
             for m in [*INDEX_INSTALL.finditer(p.read_text(errors="replace")),
                       *EXTRA_REF.finditer(p.read_text(errors="replace"))]]
    assert not found, found


def test_the_hint_names_extras_the_checkout_has():
    hint = install_hint("report", "results")
    assert "pip install '.[report,results]'" in hint and "checkout" in hint
    extras = PYPROJECT["project"]["optional-dependencies"]
    # Every extra a message names exists, so the hint installs something.
    named = set()
    for path in product_files():
        if path.suffix == ".py":
            named |= set(re.findall(r"install_hint\('(\w+)'\)", path.read_text()))
    assert named and named <= set(extras), named - set(extras)


def _requirement_names(extras: str) -> set[str]:
    wanted = PYPROJECT["project"]["dependencies"] + [r for e in extras.split(",")
                                                     for r in PYPROJECT["project"]["optional-dependencies"][e]]
    return {re.split(r"[<>=;\[ ]", r, maxsplit=1)[0].lower() for r in wanted}


def test_the_documented_gpu_node_install_brings_what_report_needs():
    """The GPU-node line (README, Getting started) is followed by `report`, which needs
    DuckDB and matplotlib (launcher/report/store.py, the plots): the line installs them."""
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        lines = re.findall(r"pip install '\.\[([\w,]+)\]'", page.read_text())
        gpu_lines = [extras for extras in lines if "nvidia" in extras.split(",")]
        assert gpu_lines, page
        for extras in gpu_lines:
            assert {"duckdb", "matplotlib", "torch", "nvidia-ml-py"} <= _requirement_names(extras), (page, extras)
