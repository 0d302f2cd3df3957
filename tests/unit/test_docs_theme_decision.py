"""The docs site's theme after Material for MkDocs (issue 41, item 12): decided and
recorded in docs/design.md, with the pins that keep today's site building meanwhile."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_docs_site_stays_on_mkdocs_1_until_its_recorded_move():
    """Material for MkDocs ends in May 2027 and MkDocs 2 drops its theme model: the decision
    (docs/design.md) pins both below their next major version until the site moves."""
    wanted = {re.split(r"[<>=]", r, maxsplit=1)[0]: r for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert "<2" in wanted["mkdocs"] and "<10" in wanted["mkdocs-material"]
    design = (ROOT / "docs" / "design.md").read_text()
    assert "## The documentation site after Material for MkDocs" in design and "Zensical" in design
