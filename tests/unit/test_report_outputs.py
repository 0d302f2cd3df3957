"""The report's files: Markdown, CSV, JSON, one offline HTML page and the
plots (non-empty PNG and SVG), made from crafted results; and the CLI."""
import csv
import json
import subprocess
import sys

import pytest

from conftest import LAUNCHER, ROOT
from hpcai.launcher.report import ReportOptions, make_report
from report_docs import crafted_set, make_result, write_result


def assert_real_png(path, min_bytes=5000):
    import matplotlib.image

    assert path.is_file() and path.stat().st_size > min_bytes, path
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0.01, f"{path} is blank"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    docs = crafted_set(base / "results")
    write_result(base / "results", make_result(device_type="cpu", vendor=None, gpus=2,
                                               cap_w=None, per_gpu=6.0, preset="tiny"))
    out = base / "out"
    written = make_report([base / "results"], ReportOptions(output=out, reference=True))
    return out, written, docs


def test_every_output_is_written(report):
    out, written, _ = report
    for name in ("report.md", "report.html", "report.json", "cells.csv",
                 "throughput-images.csv", "efficiency-images.csv", "recommendations.csv",
                 "statistics.csv", "excluded-runs.csv", "runs.csv", "fixed-work.csv"):
        assert (out / name).is_file(), name
    assert written["runs"] == 9 and written["usable"] == 8  # the failed run is not usable


def test_plots_are_non_empty_png_and_svg(report):
    _out, written, _ = report
    names = sorted(p.name for p in written["plots"])
    # With --reference the paper's rows have FLOPs (the paper preset's FLOP model, issue 41):
    # a roofline per device model of the paper's (its H100 is the 94 GB HBM2e part).
    assert names == ["clocks-resnet50", "efficiency-resnet50", "power-timeseries",
                     "roofline-h100-sxm5-94gb-hbm2e", "roofline-h200-sxm", "roofline-mi300x",
                     "throughput-resnet50"]
    for plot in written["plots"]:
        assert_real_png(plot.png)
        svg = plot.svg.read_text()
        assert "<svg" in svg and len(svg) > 5000


def test_json_and_csv_carry_the_hand_worked_numbers(report):
    out, _, docs = report
    doc = json.loads((out / "report.json").read_text())
    h100 = next(b for b in doc["best_caps"] if b["device"] == "H100")
    assert (h100["most_efficient_cap_w"], h100["fastest_cap_w"], h100["recommended_cap_w"]) == \
        (200.0, 400.0, 300.0)
    assert h100["pareto_caps_w"] == [200.0, 300.0, 400.0]
    cpu = next(b for b in doc["best_caps"] if b["device"] == "CPU")
    assert cpu["has_power"] is False and "power was not measured" in cpu["notes"][0]
    assert [e["run_id"] for e in doc["excluded_runs"]] == [docs["h100-500-failed"]["run_id"]]
    assert doc["tables"]["throughput-images"]["rows"][1][2] == "(771.68)"
    with open(out / "cells.csv") as fh:
        rows = list(csv.DictReader(fh))
    h300 = next(r for r in rows if r["device"] == "H100" and r["cap_w"] == "300.0")
    assert float(h300["throughput_per_gpu"]) == pytest.approx(1050.0)
    assert float(h300["units_per_joule_with_overhead"]) == pytest.approx(
        (40000 / 12200 + 44000 / 12200) / 2)
    assert h300["recommended"] == "True" and h300["ci_from"] == "repeats"
    assert h300["noisy"] == "True"


def test_markdown_and_html_are_self_contained(report):
    out, _, _ = report
    md = (out / "report.md").read_text()
    assert "| resnet50 | MI300X ×4 | (771.68) |" in md
    assert "![resnet50: throughput against cap](plots/throughput-resnet50.png)" in md
    assert "100 W per node" in md
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 7  # every plot above, embedded
    for remote in ('src="http', "href=\"http", "<link", "@import", "url("):
        assert remote not in page
    assert 'data-table="throughput-images"' in page and "(771.68)" in page


def cli(*args, **kwargs):
    return subprocess.run([*LAUNCHER, "report", *map(str, args)], check=False,
                          capture_output=True, text=True, cwd=ROOT, timeout=300, **kwargs)


def test_cli_report_with_a_changed_overhead(tmp_path):
    crafted_set(tmp_path / "r")
    done = cli(tmp_path / "r", "-o", tmp_path / "out", "--node-overhead-w", "0",
               "--max-slowdown", "0.5")
    assert done.returncode == 0, done.stderr
    assert "report.html" in done.stdout
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    h200 = next(c for c in doc["cells"] if c["device"] == "H100" and c["cap_w"] == 200.0)
    assert h200["units_per_joule_with_overhead"] == pytest.approx(4.0)  # 32000 / 8000
    assert "0 W per node (set with --node-overhead-w" in doc["node_overhead"]
    h100 = next(b for b in doc["best_caps"] if b["device"] == "H100")
    assert h100["recommended_cap_w"] == 200.0


@pytest.mark.parametrize("args,fragment", [
    (["/nonexistent/results"], "does not exist"),
    (["EMPTY"], "no result.json"),
    (["RESULTS", "--power-run", "nope"], "--power-run 'nope'"),
    (["RESULTS", "--max-slowdown", "1.5"], "--max-slowdown"),
])
def test_cli_report_errors_are_one_line(tmp_path, args, fragment):
    (tmp_path / "empty").mkdir()
    write_result(tmp_path / "results", make_result())
    args = [str(tmp_path / "empty") if a == "EMPTY" else
            str(tmp_path / "results") if a == "RESULTS" else a for a in args]
    done = cli(*args, "-o", tmp_path / "out")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcai-launch: error: "), done.stderr
    assert fragment in lines[0]
    assert not (tmp_path / "out").exists()  # nothing written on bad input


def test_report_help_imports_no_plotting_library():
    code = ("import sys; from hpcai.launcher.cli.hpcai_launch import main\n"
            "try:\n    main(['report', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', [m for m in ('matplotlib', 'numpy', 'jsonschema') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert "--node-overhead-w" in out and out.strip().endswith("HEAVY []")
