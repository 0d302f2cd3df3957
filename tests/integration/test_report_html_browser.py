"""The HTML report in a real headless browser (Debian's Chromium, installed by
`make test`'s setup-system step): the tables and every embedded figure render
with the network unused, and a screenshot of the page is not blank."""
import shutil
import subprocess

import pytest

from hpcai.launcher.report import ReportOptions, make_report
from report_docs import crafted_set, make_result, write_result

HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed: run `make setup-system` (Debian's chromium package)"
    return path


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    base = tmp_path_factory.mktemp("html")
    crafted_set(base / "results")
    write_result(base / "results", make_result(site="centre-b", cap_w=300.0, per_gpu=990.0,
                                               gpu="NVIDIA H200", power_per_gpu_w=290.0))
    written = make_report([base / "results"], ReportOptions(output=base / "out", reference=True))
    return written["html"], len(written["plots"]), base


def browse(chromium, base, *args):
    return subprocess.run([chromium, *HEADLESS, f"--user-data-dir={base / 'profile'}", *args],
                          check=False, capture_output=True, text=True, timeout=120)


def test_tables_and_figures_render_offline(chromium, page):
    html, plots, base = page
    done = browse(chromium, base, "--virtual-time-budget=5000", "--dump-dom", html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # The page's own check: every <img> decoded (naturalWidth > 0) once loaded.
    assert f'data-images-decoded="{plots}/{plots}"' in dom, dom[:500]
    assert plots == 4
    for key in ("recommendations", "throughput-images", "efficiency-images", "statistics",
                "excluded-runs", "fixed-work"):
        assert f'data-table="{key}"' in dom, key
    assert "(771.68)" in dom and "H100 (paper)" in dom and "@ centre-b" in dom


def test_screenshot_is_not_blank(chromium, page):
    import matplotlib.image

    html, _, base = page
    shot = base / "shot.png"
    done = browse(chromium, base, f"--screenshot={shot}", "--window-size=1280,2000",
                  html.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    # Text, table borders and plot colours: far from one flat colour.
    flat = pixels[..., :3].reshape(-1, 3)
    assert flat.std() > 0.05
    assert len({tuple(p) for p in (flat[::97] * 255).astype(int)}) > 20
