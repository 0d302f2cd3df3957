"""The report says what its energy figures stand on (issue 44 §3): each energy
table's tier note, and where runs of one table stand on different tiers, a
note naming them and a Tier column; from crafted results (tests/report_docs.py)."""
import json

from report_docs import make_result, write_result

from hpcai.launcher.report import ReportOptions, make_report


def _tier(name: str, agreement: float | None) -> dict:
    return {"tier": name, "agreement_within_frac": agreement, "stated_agreement_frac": 0.05,
            "meter_api": "HPE Cray pm_counters sysfs (pm_counters/node)" if name == "node-meter" else None,
            "calibrated": "2026-11-20T10:00:00+00:00" if name == "node-meter" else None,
            "offset_w": 150.0 if name == "node-meter" else None, "reason": None}


def _report(tmp_path, tiers: dict) -> dict:
    """H100 x4 at two caps, each run on the tier given for its cap (None: no tier, pre-1.1)."""
    folder = tmp_path / "results"
    for cap, per_gpu, watts in ((200.0, 800.0, 200.0), (400.0, 1150.0, 380.0)):
        doc = make_result(cap_w=cap, per_gpu=per_gpu, power_per_gpu_w=watts)
        if tiers[cap] is not None:
            doc["schema_version"] = "1.1"
            doc["power"]["tier"] = _tier(*tiers[cap])
        write_result(folder, doc)
    make_report([folder], ReportOptions(output=tmp_path / "out"))
    return json.loads((tmp_path / "out" / "report.json").read_text())


def _notes(doc, key) -> list[str]:
    return doc["tables"][key]["notes"]


def test_one_tier_is_named_with_its_agreement_and_no_column(tmp_path):
    doc = _report(tmp_path, {200.0: ("node-meter", 0.012), 400.0: ("node-meter", 0.021)})
    table = doc["tables"]["efficiency-images"]
    assert "Tier" not in table["header"]
    assert any(n.startswith("Measurement tier: node-meter, agreement within 2.1%") for n in table["notes"])
    assert any(n.startswith("Measurement tier: node-meter") for n in _notes(doc, "recommendations"))


def test_a_table_mixing_tiers_says_which_and_gives_each_rows_tier(tmp_path):
    doc = _report(tmp_path, {200.0: ("counter", None), 400.0: ("node-meter", 0.02)})
    table = doc["tables"]["efficiency-images"]
    mixed = [n for n in table["notes"] if "mixes measurement tiers" in n]
    assert mixed and "counter (1 run)" in mixed[0] and "node-meter, agreement within 2.0% (1 run)" in mixed[0]
    assert table["header"][-1] == "Tier" and table["rows"][0][-1] == "counter, node-meter"
    assert any("mixes measurement tiers" in n for n in _notes(doc, "recommendations"))


def test_results_before_the_tier_are_unstated_not_counted_as_counter(tmp_path):
    doc = _report(tmp_path, {200.0: None, 400.0: ("counter", None)})
    mixed = [n for n in _notes(doc, "efficiency-images") if "mixes measurement tiers" in n]
    assert mixed and "unstated (1 run)" in mixed[0] and "counter (1 run)" in mixed[0]


def test_the_fixed_work_and_facility_tables_name_their_tier(tmp_path):
    folder = tmp_path / "results"
    for cap, tier in ((200.0, ("counter", None)), (400.0, ("node-meter", 0.02))):
        doc = make_result(cap_w=cap, per_gpu=800.0 + cap, power_per_gpu_w=cap * 0.9)
        doc["spec"]["facility"] = {"pue": 1.2}
        doc["schema_version"], doc["power"]["tier"] = "1.1", _tier(*tier)
        write_result(folder, doc)
    make_report([folder], ReportOptions(output=tmp_path / "out"))
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    for key in ("fixed-work", "facility"):
        assert any("mixes measurement tiers: counter (1 run), node-meter" in n for n in _notes(doc, key)), key
