"""tools/docs_screenshots.py makes the documentation's report screenshot with the
tests' own headless Chromium from a report it builds, and the fleet heat map from
a `fleet report` of the fleet tests' synthetic campaign; the committed images are
ones it made (same size) and the docs show them."""
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed: run `make setup-system` (Debian's chromium package)"
    return path


def test_the_script_writes_a_screenshot_of_a_report_it_built(chromium, tmp_path):
    import matplotlib.image

    done = subprocess.run([sys.executable, str(ROOT / "tools" / "docs_screenshots.py"), "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    made = matplotlib.image.imread(tmp_path / "report.png")
    committed = matplotlib.image.imread(ROOT / "docs" / "img" / "report.png")
    assert made.shape == committed.shape == (1200, 1400, made.shape[2])
    # Text, table borders and cell colours: far from one flat colour.
    assert made[..., :3].std() > 0.05
    assert "img/report.png" in (ROOT / "docs" / "how-to" / "report.md").read_text()
    # The fleet heat map: the plot of a fleet report, nodes x GPUs, beside the screenshot.
    heat = matplotlib.image.imread(tmp_path / "fleet-heatmap.png")
    committed_heat = matplotlib.image.imread(ROOT / "docs" / "img" / "fleet-heatmap.png")
    assert heat.shape == committed_heat.shape
    assert heat[..., :3].std() > 0.05
    # Same campaign (fixed seed), same figures: the committed map is this one, up to
    # the anti-aliasing of another matplotlib or FreeType.
    assert abs(heat[..., :3] - committed_heat[..., :3]).mean() < 0.02
    assert "img/fleet-heatmap.png" in (ROOT / "docs" / "how-to" / "fleet-acceptance.md").read_text()
