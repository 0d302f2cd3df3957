"""`make demo` (tools/demo.py, issue 41 item 9): the whole flow on SIMULATED GPUs
(the tests' fake NVML), and every place a figure lands says it is a simulation."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_demo_runs_a_sweep_and_a_report_labelled_as_simulated(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "demo.py"), "--caps", "300,500", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 SIMULATED GPU(s)" in done.stdout
    results = sorted((out / "results").rglob("result.json"))
    assert len(results) == 2
    for path in results:
        doc = json.loads(path.read_text())
        assert doc["status"] == "complete"
        assert all(g["name"].startswith("SIMULATED ") for g in doc["gpus"])
        assert doc["spec"]["site"]["name"] == "demo-simulated"
        assert doc["software"]["gpu_library"]["driver"] == "simulated"
        assert doc["spec"]["power"]["cap_w"] in (300.0, 500.0)
        assert doc["power"]["mean_power_w"] == pytest.approx(2 * doc["spec"]["power"]["cap_w"], rel=0.02)
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["title"].startswith("SIMULATED GPUs")
    assert (out / "report" / "report.md").read_text().startswith("# SIMULATED GPUs (make demo)")
    plan = json.loads((out / "plan" / "plan.json").read_text())
    (entry,) = plan["partitions"]
    assert entry["default_cap_w"] in (300.0, 500.0)  # a one-class mix: one of the sweep's caps
