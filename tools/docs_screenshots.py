"""Screenshots of the HTML report for the documentation, made the way the tests
see the page: a report built from the tests' crafted results (tests/report_docs.py:
two GPUs, repeats, an unenforced cap, a failed run, a CPU run, a second site) and
opened in headless Chromium (Debian's `chromium`, as `make setup-system` installs it).

    .venv/bin/python tools/docs_screenshots.py            # writes docs/img/report.png
    .venv/bin/python tools/docs_screenshots.py -o DIR     # somewhere else

Commit the image it writes; tests/integration/test_docs_screenshots.py runs it.
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


def build_report(work: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from report_docs import crafted_set, make_result, write_result

    from hpcai.launcher.report import ReportOptions, make_report

    results = work / "results"
    crafted_set(results)
    write_result(results, make_result(site="centre-b", cap_w=300.0, per_gpu=990.0,
                                      gpu="NVIDIA H200", power_per_gpu_w=290.0))
    return make_report([results], ReportOptions(output=work / "report", reference=True))["html"]


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
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("docs_screenshots: chromium is missing: install Debian's chromium package "
              "(make setup-system does, as root)", file=sys.stderr)
        return 1
    args.output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpcai-docs-shots-") as tmp:
        html = build_report(Path(tmp))
        for name, (width, height) in SHOTS.items():
            screenshot(chromium, html, args.output / name, width, height, Path(tmp) / "profile")
            print(args.output / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
