"""Screenshots of the HTML report for the documentation, made the way the tests
see the page: a report built from the tests' crafted results (tests/report_docs.py:
two GPUs, repeats, an unenforced cap, a failed run, a CPU run, a second site) and
opened in headless Chromium (Debian's `chromium`, as `make setup-system` installs it).
The fleet heat map is a PNG plot already: `hpcai-launch fleet report` run on the
fleet tests' synthetic campaign (tests/fleet_campaigns.py), its plot copied.

    .venv/bin/python tools/docs_screenshots.py            # docs/img/report.png, fleet-heatmap.png
    .venv/bin/python tools/docs_screenshots.py -o DIR     # somewhere else

Commit the images it writes; tests/integration/test_docs_screenshots.py runs it.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The browser test's flags (tests/integration/test_report_html_browser.py): no network, no profile state.
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars"]
SHOTS = {"report.png": (1400, 1200)}  # name -> window (px): the report's first screen
FLEET_CAPS = (300.0, 700.0)
FLEET_PLOT = "heatmap-throughput-700W.png"  # the plot the docs show, as fleet-heatmap.png


def build_report(work: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from report_docs import crafted_set, make_result, write_result

    from hpcai.launcher.report import ReportOptions, make_report

    results = work / "results"
    crafted_set(results)
    write_result(results, make_result(site="centre-b", cap_w=300.0, per_gpu=990.0,
                                      gpu="NVIDIA H200", power_per_gpu_w=290.0))
    return make_report([results], ReportOptions(output=work / "report", reference=True))["html"]


def fleet_campaign(folder: Path) -> Path:
    """Four nodes of eight GPUs, as the fleet tests build them; on n01, GPU 1
    ignores its cap, GPU 2 runs hot and GPU 3 has a lower maximum clock."""
    import random

    sys.path.insert(0, str(ROOT / "tests"))
    from fleet_campaigns import normal_gpu, write_campaign

    rng = random.Random(27)  # fixed: the committed image is reproducible
    gpus = [normal_gpu(f"n{n:02d}", n, i, FLEET_CAPS, rng) for n in range(1, 5) for i in range(8)]
    gpus[1] = normal_gpu("n01", 1, 1, FLEET_CAPS, rng, {300.0: {"power": 650.0, "enforced": False}})
    gpus[2] = normal_gpu("n01", 1, 2, FLEET_CAPS, rng,
                         {"all": {"temperature": 92.0, "throttle": {"sw_thermal": 0.4}}})
    gpus[3] = normal_gpu("n01", 1, 3, FLEET_CAPS, rng,
                         {700.0: {"sm_clock": 1410.0, "throughput": 80.0}})
    for g in gpus:
        g["serial"] = f"16549230{int(g['node'][1:]):02d}{g['index']:03d}"  # 13 digits, as NVIDIA's
    return write_campaign(folder, gpus, caps=FLEET_CAPS)


def fleet_heatmap(work: Path, png: Path) -> None:
    """`hpcai-launch fleet report` (exit 1: the campaign has failing GPUs) and its plot."""
    campaign = fleet_campaign(work / "campaign")
    done = subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", "fleet", "report",
                           str(campaign), "-o", str(work / "fleet-report")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    plot = work / "fleet-report" / "plots" / FLEET_PLOT
    if done.returncode not in (0, 1) or not plot.is_file():
        raise SystemExit(f"docs_screenshots: fleet report made no {FLEET_PLOT}: "
                         f"{done.stderr.strip()[-500:]}")
    shutil.copyfile(plot, png)


def screenshot(chromium: str, html: Path, png: Path, width: int, height: int, profile: Path) -> None:
    done = subprocess.run([chromium, *HEADLESS, f"--user-data-dir={profile}", f"--screenshot={png}",
                           f"--window-size={width},{height}", "--virtual-time-budget=5000", html.as_uri()],
                          capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0 or not png.is_file():
        raise SystemExit(f"docs_screenshots: chromium made no screenshot: {done.stderr.strip()[-500:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpcai-docs-fleet-") as tmp:
        fleet_heatmap(Path(tmp), args.output / "fleet-heatmap.png")
        print(args.output / "fleet-heatmap.png")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("docs_screenshots: chromium is missing: install Debian's chromium package "
              "(make setup-system does, as root)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="hpcai-docs-shots-") as tmp:
        html = build_report(Path(tmp))
        for name, (width, height) in SHOTS.items():
            screenshot(chromium, html, args.output / name, width, height, Path(tmp) / "profile")
            print(args.output / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
