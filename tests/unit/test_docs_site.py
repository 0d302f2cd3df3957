"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`, so a
broken link, a page left out of the nav or an unknown generated part fails the tests;
its generated pages say what the code says now (THRESHOLDS, the JSON Schemas, the CLI)."""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from hpcai.measure.validity import THRESHOLDS


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs-site") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    return done, out


def text_of(page) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


def test_the_site_builds_strictly(site):
    done, out = site
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    assert (out / "index.html").is_file() and (out / "reference" / "cli" / "index.html").is_file()


def test_the_thresholds_page_shows_every_threshold_of_the_code(site):
    _, out = site
    page = text_of(out / "reference" / "validity-thresholds" / "index.html")
    for name, value in THRESHOLDS.items():
        shown = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
        assert re.search(rf"\b{name}\s+{re.escape(shown)}\s", page), (name, shown)
    # The concepts page reads its figures from THRESHOLDS too: no marker is left unrendered.
    concepts = text_of(out / "concepts" / "validity" / "index.html")
    assert "{{" not in concepts and f"under {THRESHOLDS['window_warn_s']:g} s" in concepts


def test_the_schema_pages_list_every_field_of_the_schemas(site):
    _, out = site
    page = text_of(out / "reference" / "result-schema" / "index.html")
    schema = json.loads((ROOT / "hpcai" / "schema" / "result-v1.schema.json").read_text())
    for key, sub in schema["properties"].items():
        assert re.search(rf"\s{re.escape(key)}\s", page), key
        for inner in sub.get("properties", {}):
            assert f"{key}.{inner}" in page, f"{key}.{inner}"
    for name in schema["$defs"]:
        assert f"id=\"result-v1-def-{name}\"" in (out / "reference" / "result-schema" / "index.html").read_text()
    site_page = text_of(out / "reference" / "site-schema" / "index.html")
    assert "power.allowed_cap_range_w" in site_page and "node_power.ipmi.credentials_file" in site_page


def test_the_cli_reference_lists_every_command_and_option(site):
    from hpcai.launcher.cli.hpcai_launch import main

    _, out = site
    page = text_of(out / "reference" / "cli" / "index.html")
    for name, command in main.commands.items():
        if getattr(command, "hidden", False):
            continue
        assert f"hpcai-launch {name}" in page, name
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and not getattr(param, "hidden", False):
                    assert opt in page, f"{name} {opt}"


def test_an_unknown_generated_part_stops_the_build():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from mkdocs.exceptions import PluginError
        from mkdocs_hooks import render_markers
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert render_markers("{{ threshold.window_warn_s }} s") == f"{THRESHOLDS['window_warn_s']:g} s"
    with pytest.raises(PluginError, match="no threshold 'window_warm_s'"):
        render_markers("{{ threshold.window_warm_s }}")
    with pytest.raises(PluginError, match="no schema 'result-v9'"):
        render_markers("<!-- generated: schema result-v9 -->")


def test_the_readme_is_the_first_five_minutes_and_points_to_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 100
    for must in ("make run", "make test", "hpcai-launch resnet50 --cap 300", "docs/index.md", "| `make test` |"):
        assert must in readme, must
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link
