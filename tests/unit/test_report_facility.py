"""The report's facility table (PUE, cost, CO2 per fixed work), --objective,
and the measured-boundaries section, from crafted results (tests/report_docs.py)."""
import json

import pytest
from report_docs import make_result, write_result

from hpcai.errors import UsageError
from hpcai.launcher.report import ReportOptions, make_report

FACILITY = {"pue": 1.25, "carbon_g_per_kwh": 400.0, "price_per_kwh": 0.30, "currency": "EUR",
            "node_hour_price": 40.0}


def crafted(tmp_path, facility=FACILITY, node_energy=None):
    """H100 x4 at two caps. 200 W: 800 img/s/GPU at 200 W/GPU; 400 W: 1150 at 380 W/GPU;
    10 s windows, 100 W overhead. Node energy per 1e6 images (kWh):
      200 W: (8000 + 1000) J / 32000 img -> 0.28125 J/img -> 0.078125 kWh
      400 W: (15200 + 1000) J / 46000 img -> 0.352174 J/img -> 0.097826 kWh"""
    folder = tmp_path / "results"
    for cap, per_gpu, watts in ((200.0, 800.0, 200.0), (400.0, 1150.0, 380.0)):
        doc = make_result(cap_w=cap, per_gpu=per_gpu, power_per_gpu_w=watts)
        doc["spec"]["facility"] = facility
        if node_energy is not None:
            doc["power"]["node_power"] = {
                "sources": [{"source": "pm_counters", "api": "HPE Cray pm_counters sysfs",
                             "channel": "node", "scope": "node", "boundary": "node",
                             "interval_s": 1.0, "achieved_interval_s": 1.0, "samples": 10,
                             "energy_j": node_energy[cap], "energy_basis": "energy counter",
                             "mean_power_w": node_energy[cap] / 10}],
                "reasons": [], "node_energy_j": node_energy[cap],
                "node_energy_from": "pm_counters/node", "measured_overhead_j": 0.0,
                "measured_overhead_w": 0.0}
            doc["power"]["energy_with_overhead_basis"] = "measured (pm_counters/node)"
        write_result(folder, doc)
    return folder


def report(tmp_path, folder, **opts):
    make_report([folder], ReportOptions(output=tmp_path / "out", **opts))
    return json.loads((tmp_path / "out" / "report.json").read_text())


def test_facility_energy_cost_and_co2_per_fixed_work(tmp_path):
    doc = report(tmp_path, crafted(tmp_path))
    rows = {r[2]: r for r in doc["tables"]["facility"]["rows"]}
    assert doc["tables"]["facility"]["header"][6] == "Cost (EUR)"
    assert float(rows["200 W"][5]) == pytest.approx(0.28125 * 1e6 / 3.6e6 * 1.25, rel=1e-4)
    hours200 = 1e6 / 3200 / 3600
    cost200 = 0.28125 * 1e6 / 3.6e6 * 1.25 * 0.30 + hours200 * 40.0
    assert float(rows["200 W"][6]) == pytest.approx(cost200, rel=1e-4)
    assert float(rows["200 W"][7]) == pytest.approx(0.28125 * 1e6 / 3.6e6 * 1.25 * 0.4, rel=1e-4)


def test_objective_picks_the_cap(tmp_path):
    folder = crafted(tmp_path)
    # Energy (and CO2, proportional to it): 200 W. Node hours at 40 EUR make the faster
    # 400 W cheaper per 1e6 images: 200 W 0.0293 + 0.0868 h x 40 = 3.50 EUR,
    # 400 W 0.0367 + 0.0604 h x 40 = 2.45 EUR. EDP: 8.79e-5 vs 7.66e-5 J.s: 400 W.
    picks = {}
    for objective in ("energy", "co2", "cost", "edp"):
        doc = report(tmp_path, folder, objective=objective, max_slowdown=0.5)
        picks[objective] = doc["tables"]["recommendations"]["rows"][0][4]
    assert picks == {"energy": "200 W", "co2": "200 W", "cost": "400 W", "edp": "400 W"}


def test_cost_objective_without_a_price_is_a_one_line_error(tmp_path):
    folder = crafted(tmp_path, facility={"pue": 1.1})
    with pytest.raises(UsageError, match="needs price_per_kwh"):
        report(tmp_path, folder, objective="cost")


def test_boundaries_section_and_measured_node_energy(tmp_path):
    folder = crafted(tmp_path, node_energy={200.0: 12000.0, 400.0: 20000.0})
    doc = report(tmp_path, folder)
    rows = [[c for c in r] for r in doc["tables"]["boundaries"]["rows"]]
    assert ["H100 ×4 @ default", "node (node)", "HPE Cray pm_counters sysfs", "node_power", "2"] in rows
    assert ["H100 ×4 @ default", "node, for efficiency with node", "measured (pm_counters/node)",
            "energy_with_overhead_j", "2"] in rows
    # Efficiency with node from the measured node energy: 32000 img / 12000 J at 200 W.
    cell = next(c for c in doc["cells"] if c["cap_w"] == 200.0)
    assert cell["units_per_joule_with_overhead"] == pytest.approx(32000 / 12000.0)
    assert "measured at the node for 2 of 2 run(s)" in doc["node_overhead"]


def test_no_facility_no_table(tmp_path):
    doc = report(tmp_path, crafted(tmp_path, facility={}))
    assert "facility" not in doc["tables"]
