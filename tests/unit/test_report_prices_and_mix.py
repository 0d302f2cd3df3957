"""Issue 42 §1, the report's side: prices given at report time over what each result's
site recorded (--energy-price, --pue, --carbon-intensity, --currency; one rule with the
planner's prices file), and `report --mix` heading the report with the planner's answer
and writing the plan beside it. Results crafted (tests/report_docs.py, test_planner.py)."""
import json
import subprocess

import pytest
from conftest import LAUNCHER, ROOT, one_line_error
from report_docs import make_result, write_result
from test_planner import build_results, write_inputs

from hpcai.errors import ConfigError, UsageError
from hpcai.launcher.planner import PlanOptions, make_plan
from hpcai.launcher.planner.inputs import facility_override, read_prices
from hpcai.launcher.report import ReportOptions, load_results, make_report
from hpcai.launcher.report.safe_text import md_text

RECORDED = {"pue": 1.25, "price_per_kwh": 0.30, "currency": "EUR", "node_hour_price": 40.0}


def crafted(tmp_path, facility=RECORDED):
    """H100 x4, 10 s windows, 100 W overhead. 200 W: 800 img/s/GPU at 200 W/GPU,
    (8000 + 1000) J / 32000 img; 400 W: 1150 img/s/GPU at 380 W/GPU, (15200 + 1000) J / 46000 img."""
    folder = tmp_path / "results"
    for cap, per_gpu, watts in ((200.0, 800.0, 200.0), (400.0, 1150.0, 380.0)):
        doc = make_result(cap_w=cap, per_gpu=per_gpu, power_per_gpu_w=watts)
        doc["spec"]["facility"] = dict(facility)
        write_result(folder, doc)
    return folder


def report(tmp_path, folder, **opts):
    make_report([folder], ReportOptions(output=tmp_path / "out", **opts))
    return json.loads((tmp_path / "out" / "report.json").read_text())


def test_report_time_prices_replace_the_recorded_ones_and_say_so(tmp_path):
    folder = crafted(tmp_path)
    recorded_files = sorted(folder.rglob("result.json"))
    before = [p.read_bytes() for p in recorded_files]
    doc = report(tmp_path, folder, energy_price=0.5, pue=1.5, currency="CHF")
    rows = {r[2]: r for r in doc["tables"]["facility"]["rows"]}
    assert doc["tables"]["facility"]["header"][6] == "Cost (CHF)"
    kwh200 = (8000 + 1000) / 32000 * 1e6 / 3.6e6 * 1.5  # node J per image x 1e6 images, x PUE 1.5
    hours200 = 1e6 / 3200 / 3600  # node_hour_price 40 was not overridden: still counted
    assert float(rows["200 W"][4]) == pytest.approx(1.5)
    assert float(rows["200 W"][5]) == pytest.approx(kwh200, rel=1e-4)
    assert float(rows["200 W"][6]) == pytest.approx(kwh200 * 0.5 + hours200 * 40.0, rel=1e-4)
    note = doc["facility_note"]
    given, recorded = note.split("recorded")
    assert "price_per_kwh 0.5, pue 1.5, currency CHF" in given
    assert "(price_per_kwh 0.3; pue 1.25; currency EUR)" in recorded
    assert md_text(note) in (tmp_path / "out" / "report.md").read_text()
    assert [p.read_bytes() for p in recorded_files] == before  # the results are not changed


def test_cost_objective_takes_the_report_time_price(tmp_path):
    # The results recorded no price: --objective cost says to pass --energy-price ...
    folder = crafted(tmp_path, facility={"pue": 1.25, "node_hour_price": 40.0})
    with pytest.raises(UsageError) as raised:
        report(tmp_path, folder, objective="cost", max_slowdown=0.5)
    assert "needs price_per_kwh" in raised.value.message and "pass --energy-price" in raised.value.hint
    # ... and with it, node hours at 40 make 400 W cheaper per 1e6 images:
    # 200 W 0.0977 kWh x 0.30 + 0.0868 h x 40 = 3.50; 400 W 0.1223 x 0.30 + 0.0604 h x 40 = 2.45.
    doc = report(tmp_path, folder, objective="cost", max_slowdown=0.5, energy_price=0.30)
    assert doc["tables"]["recommendations"]["rows"][0][4] == "400 W"


def test_the_options_and_the_prices_file_share_one_rule(tmp_path):
    (tmp_path / "p.toml").write_text("[energy]\npue = 0.9\n")
    with pytest.raises(ConfigError) as from_file:
        read_prices(tmp_path / "p.toml")
    with pytest.raises(UsageError) as from_option:
        facility_override(pue=0.9)
    assert from_option.value.message == "--pue is 0.9" and from_option.value.hint == from_file.value.hint
    assert facility_override(0.2, 1.3, 380.0, "EUR") == {
        "price_per_kwh": 0.2, "pue": 1.3, "carbon_g_per_kwh": 380.0, "currency": "EUR"}


@pytest.mark.parametrize("args, fragment", [
    (("--energy-price", "nan"), "--energy-price is nan"),
    (("--energy-price", "-0.1"), "--energy-price is -0.1"),
    (("--carbon-intensity", "inf"), "--carbon-intensity is inf"),
    (("--pue", "0.5"), "--pue is 0.5"),
    (("--currency", "euro"), "--currency is 'euro'"),
    (("--prices", "p.toml"), "--prices is the plan's prices file and needs --mix"),
    (("--mix", "mix.toml", "--objective", "edp"), "not edp"),
    (("--mix", "nosuch.toml"), "cannot read mix file"),
    (("--mix", "mix.toml", "--prices", "negative.toml"), "energy.price_per_kwh is -1.0"),
])
def test_bad_report_time_prices_are_one_line_and_exit_2(tmp_path, args, fragment):
    folder = crafted(tmp_path)
    (tmp_path / "mix.toml").write_text('[[class]]\nname = "cv"\nworkload = "resnet50"\nshare = 1.0\n')
    (tmp_path / "negative.toml").write_text("[energy]\nprice_per_kwh = -1.0\n")
    args = [str(tmp_path / a) if a.endswith(".toml") else a for a in args]
    done = subprocess.run([*LAUNCHER, "report", str(folder), *args, "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    one_line_error(done, fragment)
    assert done.returncode == 2 and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mix") / "results"
    build_results(folder)
    return folder


DECISIONS = ("procurement", "partitions", "sensitivity", "knob_notes", "left_out")


def test_mix_heads_the_report_with_the_planners_answer(tmp_path, results):
    mix_file, prices = write_inputs(tmp_path)
    written = make_plan([results], PlanOptions(mix=mix_file, prices=prices, objective="cost",
                                               output=tmp_path / "alone"))
    doc = report(tmp_path, results, mix=mix_file, prices=prices, objective="cost")
    plan = json.loads((tmp_path / "out" / "plan" / "plan.json").read_text())
    alone = json.loads((tmp_path / "alone" / "plan.json").read_text())
    assert {k: plan[k] for k in DECISIONS} == {k: alone[k] for k in DECISIONS}  # the same computation
    assert doc["plan"]["headline"] == written["headline"]
    # The prices file's [energy] figures price the report's own tables too (its results recorded none).
    assert "price_per_kwh 0.25, pue 1.3, carbon_g_per_kwh 380, currency EUR" in doc["facility_note"]
    assert "(price_per_kwh none; pue none; carbon_g_per_kwh none; currency none)" in doc["facility_note"]
    buy, caps = written["headline"]
    assert buy == f"Buy: {plan['procurement'][0]['gpu']}" + buy[len("Buy: ") + len(plan["procurement"][0]["gpu"]):]
    assert all(f"{e['default_cap_w']:g} W" in caps for e in plan["partitions"]
               if e["gpu"] == plan["procurement"][0]["gpu"])
    # The first screen: right under the title, the answer in two lines, the second linking the plan.
    md = (tmp_path / "out" / "report.md").read_text().splitlines()
    assert md[2].startswith(f"For the job mix (--mix): {buy}")
    assert md[3].startswith(md_text(caps)) and md[3].rstrip().endswith("[plan/plan.html](plan/plan.html)")
    html = (tmp_path / "out" / "report.html").read_text()
    assert '<a href="plan/plan.html">plan/plan.html</a>' in html
    assert html.index("For the job mix") < html.index("Generated ")
    assert {doc["plan"][k] for k in ("html", "json", "policy")} == {
        "plan/plan.html", "plan/plan.json", "plan/policy.toml"}


def test_report_time_price_over_the_prices_file_means_the_same(tmp_path, results):
    # --prices P --energy-price 0.4 plans as P with its [energy] price_per_kwh 0.4 would.
    mix_file, prices = write_inputs(tmp_path)
    text = prices.read_text()
    assert "price_per_kwh = 0.25" in text
    (tmp_path / "p04.toml").write_text(text.replace("price_per_kwh = 0.25", "price_per_kwh = 0.4"))
    make_plan([results], PlanOptions(mix=mix_file, prices=tmp_path / "p04.toml", objective="cost",
                                     output=tmp_path / "alone"))
    report(tmp_path, results, mix=mix_file, prices=prices, objective="cost", energy_price=0.4)
    plan = json.loads((tmp_path / "out" / "plan" / "plan.json").read_text())
    alone = json.loads((tmp_path / "alone" / "plan.json").read_text())
    assert plan["inputs"]["prices"]["energy_per_kwh"] == 0.4
    assert {k: plan[k] for k in DECISIONS} == {k: alone[k] for k in DECISIONS}


def test_load_results_is_the_reports_loading_without_analysis(tmp_path):
    folder = crafted(tmp_path)
    parts = load_results([folder], ReportOptions(output=tmp_path / "made"))
    assert sorted(r.cap_w for r in parts.runs) == [200.0, 400.0]
    assert parts.cells == [] and (tmp_path / "made").is_dir()
