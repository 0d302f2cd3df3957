"""The HTML report in a real headless browser (Debian's Chromium, installed by
`make test`'s setup-system step): the tables and every embedded figure render
with the network unused, a screenshot of the page is not blank, no table is
wider than a 1400 px window, the page never scrolls sideways on a phone, and
every plot's legend has one entry per series."""
import json
import re
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
    # Two presets on one CPU (each its own series), filed under a long shared-cluster path.
    deep = base / "results" / ("a-long-project-folder-on-a-shared-cluster-" * 3) / "runs"
    for preset, per_gpu in (("short", 7.07), ("tiny", 2.1)):
        write_result(deep, make_result(device_type="cpu", gpus=2, cap_w=None, preset=preset,
                                       per_gpu=per_gpu, epochs=[per_gpu * 0.9, per_gpu, per_gpu * 1.1]))
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
    assert plots == 7  # 4, and a roofline per device of the paper's rows (their TFLOP/s from its FLOP model)
    for key in ("recommendations", "throughput-images", "efficiency-images", "statistics",
                "excluded-runs", "fixed-work"):
        assert f'data-table="{key}"' in dom, key
    assert "(771.68)" in dom and "H100 (paper)" in dom and "@ centre-b" in dom


def _checks(chromium, base, html, width):
    done = browse(chromium, base, "--virtual-time-budget=5000", f"--window-size={width},900",
                  "--dump-dom", html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    found = dict(re.findall(r'data-(wide-tables|page-width)="([^"]*)"', done.stdout))
    assert set(found) == {"wide-tables", "page-width"}, done.stdout[:500]
    return found


def test_no_table_overflows_a_1400_px_window(chromium, page):
    html, _, base = page
    found = _checks(chromium, base, html, 1400)
    assert found["wide-tables"] == "", f"tables wider than the page: {found['wide-tables']}"
    scroll, inner = map(int, found["page-width"].split("/"))
    assert scroll <= inner


def test_the_page_never_scrolls_sideways_on_a_phone(chromium, page):
    # Headless Chromium lays out no narrower than 500 px; wide tables scroll in their own box.
    html, _, base = page
    found = _checks(chromium, base, html, 390)
    scroll, inner = map(int, found["page-width"].split("/"))
    assert scroll <= inner, found


def test_every_plot_has_one_legend_entry_per_series(page):
    html, _, base = page
    report = json.loads((html.parent / "report.json").read_text())
    series = {(c["workload"], c["preset"], c["device"], c["site"], c["gpus"]) for c in report["cells"]}
    assert len(series) == 5  # H100, MI300X, H200 @ centre-b, CPU short, CPU tiny
    for plot in report["plots"]:
        svg = (html.parent / plot["svg"]).read_text()
        legend = svg[svg.index('<g id="legend_1">'):]
        # Matplotlib's SVG keeps each text as a comment before its glyphs.
        entries = [e for e in re.findall(r"<!-- (.*?) -->", legend)]
        if plot["name"].startswith("throughput-"):
            ours = [e for e in entries if "(paper)" not in e and "not enforced" not in e]
            assert len(ours) == len(set(ours)) == len(series), entries
            assert "CPU ×2 @ default, short preset" in ours and "CPU ×2 @ default, tiny preset" in ours
            assert {"H100 (paper)", "H200 (paper)", "MI300X (paper)"} <= set(entries)
        elif plot["name"].startswith("efficiency-"):
            with_power = {s for s in series if s[2] != "CPU"}
            assert len(entries) == len(set(entries)) == len(with_power), entries


def test_screenshots_at_1400_px_and_phone_width_are_not_blank(chromium, page):
    import matplotlib.image

    html, _, base = page
    for width in (1400, 390):
        shot = base / f"shot-{width}.png"
        done = browse(chromium, base, f"--screenshot={shot}", f"--window-size={width},2000",
                      html.as_uri())
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        pixels = matplotlib.image.imread(shot)
        assert pixels.shape[:2] == (2000, width)
        flat = pixels[..., :3].reshape(-1, 3)
        assert flat.std() > 0.05


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
