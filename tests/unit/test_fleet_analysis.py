"""The fleet analysis on campaigns built from a real result document
(tests/fleet_campaigns.py): the outliers named with their reasons, no other
GPU; the spread per cap; drift by UUID; selftest failures; bad input."""
import csv
import json
import os
import random
import subprocess
import sys

import pytest

from conftest import ROOT, one_line_error
from fleet_campaigns import gpu_uuid, normal_gpu, result, write_campaign
from hpcai.launcher.fleet.analysis import Settings, analyse
from hpcai.launcher.fleet.records import load

CAPS = (300.0, 700.0)
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]


def three_faulty_node(rng, node="n01", node_no=1):
    """GPU 1 ignores its cap, GPU 2 runs hot and throttles, GPU 3 has a lower
    maximum clock (and so less throughput at the high cap); the rest normal."""
    gpus = [normal_gpu(node, node_no, i, CAPS, rng) for i in range(8)]
    gpus[1] = normal_gpu(node, node_no, 1, CAPS, rng,
                         {300.0: {"power": 650.0, "enforced": False}})
    hot = {"temperature": 92.0, "throttle": {"sw_thermal": 0.4, "sw_power_cap": 0.2}}
    gpus[2] = normal_gpu(node, node_no, 2, CAPS, rng, {"all": hot})
    gpus[3] = normal_gpu(node, node_no, 3, CAPS, rng,
                         {700.0: {"sm_clock": 1410.0, "throughput": 80.0}})
    return gpus


def verdicts(doc):
    return {g["index"]: (g["verdict"], [r["text"] for r in g["reasons"]]) for g in doc["gpus"]}


def test_the_three_faulty_gpus_are_named_with_their_reasons_and_no_other(tmp_path):
    folder = write_campaign(tmp_path / "c", three_faulty_node(random.Random(1)))
    _, records = load([str(folder)])
    doc = analyse(records, list(CAPS))
    got = verdicts(doc)
    assert got[1][0] == "fail"
    assert "cap not enforced at 300 W (drew 650 W)" in got[1][1]
    assert got[2][0] == "fail"
    assert "thermal throttling in 40% of readings at 300 W" in got[2][1]
    assert any(t.startswith("temperature at 700 W") and "above the fleet" in t for t in got[2][1])
    assert got[3][0] == "fail"
    assert any(t.startswith("SM clock at 700 W") and "below the fleet" in t for t in got[3][1])
    assert any(t.startswith("throughput at 700 W") and "below the fleet" in t for t in got[3][1])
    # Each names its own fault only: the hot GPU is not blamed for a clock, and so on.
    assert not any("SM clock" in t or "cap not" in t for t in got[2][1])
    assert not any("thermal" in t or "cap not" in t for t in got[3][1])
    assert {i for i, (v, _) in got.items() if v != "pass"} == {1, 2, 3}
    assert all(got[i] == ("pass", []) for i in (0, 4, 5, 6, 7))
    assert doc["summary"] == {"gpus": 8, "pass": 5, "warn": 0, "fail": 3}


def test_the_threshold_is_configurable(tmp_path):
    folder = write_campaign(tmp_path / "c", three_faulty_node(random.Random(2)))
    _, records = load([str(folder)])
    strict = verdicts(analyse(records, list(CAPS)))[3]
    lenient = verdicts(analyse(records, list(CAPS), Settings(threshold=1000.0)))[3]
    assert strict[0] == "fail"
    # Far beyond every z-score: the slow GPU's statistics no longer flag it.
    assert lenient == ("pass", [])


def test_the_spread_per_cap_shows_variability_growing_as_the_cap_falls(tmp_path):
    rng = random.Random(3)
    gpus = []
    for i in range(16):
        uuid = gpu_uuid(2, i)
        gpus.append({"node": f"n{i // 8:02d}", "index": i % 8, "uuid": uuid, "results": [
            result(uuid, i % 8, 300.0, throughput=rng.gauss(60.0, 3.0)),
            result(uuid, i % 8, 700.0, throughput=rng.gauss(100.0, 1.0))]})
    folder = write_campaign(tmp_path / "c", gpus)
    _, records = load([str(folder)])
    spread = analyse(records, list(CAPS))["spread"]
    assert spread["300"]["throughput"]["robust_cv"] > 2 * spread["700"]["throughput"]["robust_cv"]
    assert spread["300"]["throughput"]["n"] == 16


def test_drift_is_matched_by_uuid_and_the_gpu_that_moved_most_comes_first(tmp_path):
    rng = random.Random(4)
    before = [normal_gpu("n01", 1, i, CAPS, rng) for i in range(6)]
    now = [normal_gpu("n01", 1, i, CAPS, rng) for i in range(6)]
    now[4] = normal_gpu("n01", 1, 4, CAPS, rng, {700.0: {"throughput": 90.0}})
    # GPU 5 was replaced: a new UUID at the same place is a new GPU, not drift.
    now[5] = normal_gpu("n01", 9, 5, CAPS, rng)
    old = write_campaign(tmp_path / "old", before)
    new = write_campaign(tmp_path / "new", now)
    _, earlier = load([str(old)])
    _, records = load([str(new)])
    doc = analyse(records, list(CAPS), Settings(), earlier)
    drift = doc["drift"]
    assert drift["matched"] == 5 and drift["new"] == 1 and drift["gone"] == 1
    assert drift["moved_most"][0] == gpu_uuid(1, 4)
    change = drift["gpus"][0]["changes"][700.0]["throughput"]
    assert change == pytest.approx(90.0 / before[4]["results"][1]["throughput"]["per_gpu"] - 1)
    texts = verdicts(doc)[4][1]
    assert any(t.startswith("throughput at 700 W") and "below its earlier campaign" in t
               for t in texts)


def test_a_gpu_that_failed_its_selftest_is_reported_not_measured(tmp_path):
    rng = random.Random(5)
    gpus = [normal_gpu("n01", 1, i, CAPS, rng) for i in range(4)]
    gpus.append({"node": "n01", "index": 4, "uuid": gpu_uuid(1, 4), "state": "selftest_failed",
                 "selftest": {"verdict": "FAIL",
                              "reason": "power: GPU 4 energy: counter 0 J vs integrated 300 J"},
                 "results": []})
    folder = write_campaign(tmp_path / "c", gpus)
    _, records = load([str(folder)])
    doc = analyse(records, list(CAPS))
    got = verdicts(doc)[4]
    assert got == ("fail", ["selftest failed: power: GPU 4 energy: counter 0 J vs integrated "
                            "300 J (not measured)"])
    assert doc["spread"]["300"]["throughput"]["n"] == 4


def test_results_the_unit_did_not_make_are_not_believed(tmp_path):
    rng = random.Random(6)
    gpus = [normal_gpu("n01", 1, i, CAPS, rng) for i in range(4)]
    # A result of another GPU's UUID, and one of another workload, in GPU 0's folder.
    gpus[0]["results"].append(result(gpu_uuid(7, 7), 0, 300.0, throughput=1.0,
                                     finished="2027-01-01T00:00:00+00:00"))
    gpus[0]["results"].append(result(gpu_uuid(1, 0), 0, 300.0, throughput=1.0,
                                     workload="bert", finished="2027-01-01T00:00:00+00:00"))
    folder = write_campaign(tmp_path / "c", gpus)
    # A symbolic link to a slow result elsewhere is not followed either.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "result.json").write_text(json.dumps(
        result(gpu_uuid(1, 1), 1, 300.0, throughput=1.0, finished="2027-01-01T00:00:00+00:00")))
    os.symlink(elsewhere, folder / "nodes/n01/gpu1/runs/linked")
    _, records = load([str(folder)])
    doc = analyse(records, list(CAPS))
    assert all(g["verdict"] == "pass" for g in doc["gpus"]), verdicts(doc)


def test_a_result_edited_after_the_run_is_not_believed(tmp_path):
    rng = random.Random(9)
    gpus = [normal_gpu("n01", 1, i, CAPS, rng) for i in range(6)]
    gpus[0] = normal_gpu("n01", 1, 0, CAPS, rng, {300.0: {"throughput": 40.0}})  # slow at 300 W
    edited = result(gpu_uuid(1, 0), 0, 300.0, throughput=40.0, finished="2027-01-01T00:00:00+00:00")
    edited["throughput"]["per_gpu"] *= 3  # "it was fast after all", written by hand
    edited["throughput"]["node"] *= 3
    gpus[0]["results"].append(edited)
    _, records = load([str(write_campaign(tmp_path / "c", gpus))])
    doc = analyse(records, list(CAPS))
    assert verdicts(doc)[0][0] == "fail" and records[0].caps[300.0].values["throughput"] == pytest.approx(40.0)


def _cli(*args):
    return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_fleet_report_writes_the_ticketing_outputs_and_exits_1_on_a_failed_gpu(tmp_path):
    folder = write_campaign(tmp_path / "c", three_faulty_node(random.Random(7)))
    done = _cli("fleet", "report", str(folder), "-o", str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr
    assert "3 fail" in done.stdout
    rows = list(csv.DictReader((tmp_path / "r" / "outliers.csv").open()))
    assert {r["uuid"] for r in rows} == {gpu_uuid(1, 1), gpu_uuid(1, 2), gpu_uuid(1, 3)}
    assert {r["gpu_verdict"] for r in rows} == {"fail"}
    report = json.loads((tmp_path / "r" / "fleet.json").read_text())
    assert report["summary"]["fail"] == 3 and report["workload"] == "resnet50"
    plots = {p.name for p in (tmp_path / "r" / "plots").iterdir()}
    assert {"heatmap-sm_clock_mhz-700W.png", "distribution-throughput.png"} <= plots
    assert "## GPUs that did not pass" in (tmp_path / "r" / "fleet.md").read_text()
    spread = list(csv.DictReader((tmp_path / "r" / "spread.csv").open()))
    assert {(r["cap_w"], r["metric"]) for r in spread} >= {("300", "throughput"),
                                                           ("700", "sm_clock_mhz")}
    as_json = _cli("fleet", "report", str(folder), "--json")
    assert json.loads(as_json.stdout)["summary"]["fail"] == 3


def test_a_fleet_that_passes_exits_0(tmp_path):
    rng = random.Random(8)
    folder = write_campaign(tmp_path / "c", [normal_gpu("n01", 1, i, CAPS, rng)
                                            for i in range(6)])
    done = _cli("fleet", "report", str(folder))
    assert done.returncode == 0, done.stderr + done.stdout
    assert "6 pass, 0 warn, 0 fail" in done.stdout


def test_bad_input_is_one_line(tmp_path):
    rng = random.Random(9)
    ours = write_campaign(tmp_path / "ours", [normal_gpu("n01", 1, i, CAPS, rng) for i in range(3)])
    theirs = write_campaign(tmp_path / "theirs", [normal_gpu("n02", 2, i, CAPS, rng)
                                                  for i in range(3)], workload="vit-l16")
    one_line_error(_cli("fleet", "report", str(ours), str(theirs)),
                   "measured workload vit-l16", "one workload and preset")
    (tmp_path / "plain").mkdir()
    one_line_error(_cli("fleet", "report", str(tmp_path / "plain")), "is not a fleet campaign")
    one_line_error(_cli("fleet", "status", str(tmp_path / "plain")), "is not a fleet campaign")
    # A campaign folder of another workload: refused before any GPU is looked at.
    done = _cli("fleet", "run", "resnet50", "--preset", "tiny", "--cap", "300,700", "--local",
                "-o", str(theirs))
    one_line_error(done, "measures workload vit-l16, not resnet50", "give a new -o folder")
    done = _cli("fleet", "run", "vit-l16", "--preset", "tiny", "--cap", "300", "--local",
                "-o", str(theirs))
    one_line_error(done, "measures caps 300,700, not 300", "--cap 300,700")
    one_line_error(_cli("fleet", "run", "resnet50", "--cap", "300", "-o", str(tmp_path / "x")),
                   "give --local")


def test_each_gpu_is_held_to_its_own_campaigns_caps(tmp_path):
    rng = random.Random(10)
    both = write_campaign(tmp_path / "a", [normal_gpu("n01", 1, i, CAPS, rng) for i in range(4)])
    low = write_campaign(tmp_path / "b", [normal_gpu("n02", 2, i, (300.0,), rng)
                                          for i in range(4)], caps=(300.0,))
    done = _cli("fleet", "report", str(both), str(low), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert doc["summary"] == {"gpus": 8, "pass": 8, "warn": 0, "fail": 0}
    assert doc["spread"]["300"]["throughput"]["n"] == 8
    assert doc["spread"]["700"]["throughput"]["n"] == 4


def test_a_node_of_the_campaign_that_measured_nothing_fails_the_report(tmp_path):
    rng = random.Random(11)
    folder = write_campaign(tmp_path / "c", [normal_gpu("n01", 1, i, CAPS, rng) for i in range(4)])
    doc = json.loads((folder / "campaign.json").read_text())
    doc["expected_nodes"] = ["n01", "n02"]  # n02's job never started
    (folder / "campaign.json").write_text(json.dumps(doc))
    done = _cli("fleet", "report", str(folder), "-o", str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr
    assert "FAIL n02: no GPU measured" in done.stdout
    assert json.loads((tmp_path / "r" / "fleet.json").read_text())["nodes_not_measured"] == ["n02"]
