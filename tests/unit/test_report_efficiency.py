"""Best cap, Pareto front, the constrained recommendation and energy x time,
against figures worked out by hand (see report_docs.crafted_set)."""
import pytest

from hpcai.launcher.report.efficiency import analyse, edp_per_unit, fixed_work
from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.stats import aggregate
from report_docs import crafted_set, make_result, write_result


def analyses(tmp_path, max_slowdown=0.10, overhead=None):
    crafted_set(tmp_path)
    runs, _ = read_runs([tmp_path])
    return {a.group.device: a for a in analyse(aggregate(runs, overhead, 0.05), max_slowdown)}


def caps(cells):
    return [c.cap_w for c in cells]


def test_best_fastest_and_recommended_cap_on_h100(tmp_path):
    a = analyses(tmp_path)["H100"]
    assert a.best.cap_w == 200.0  # 3.5556 img/J
    assert a.fastest.cap_w == 400.0  # 1150 img/s
    # Within 10% of 1150 (>= 1035): 300 W (1050, 3.4426 img/J) and 400 W (2.8395): 300 W.
    assert a.recommended.cap_w == 300.0
    assert a.min_edp.cap_w == 300.0
    assert caps(a.pareto) == [200.0, 300.0, 400.0]


def test_the_constraint_moves_the_recommendation(tmp_path):
    assert analyses(tmp_path, max_slowdown=0.0)["H100"].recommended.cap_w == 400.0
    assert analyses(tmp_path / "b", max_slowdown=0.5)["H100"].recommended.cap_w == 200.0


def test_an_unenforced_cap_is_never_recommended(tmp_path):
    a = analyses(tmp_path)["MI300X"]
    # 200 W has the highest efficiency (2.374 img/J) but the GPU did not hold it.
    unenforced = next(c for c in a.cells if c.cap_w == 200.0)
    assert unenforced.efficiency.mean == pytest.approx(30867 / 13000)
    assert unenforced.efficiency.mean > max(c.efficiency.mean for c in a.candidates)
    assert a.best.cap_w == 400.0 and 200.0 not in caps(a.candidates)
    assert any("not enforced" in n and "200 W" in n for n in a.notes)
    assert a.recommended.cap_w == 750.0  # the only cap within 10% of 1525.1


def test_pareto_front_drops_dominated_points(tmp_path):
    write_result(tmp_path, make_result(cap_w=200.0, per_gpu=800.0, power_per_gpu_w=200.0))
    # 300 W: faster but less efficient than 400 W below, which beats it on both.
    write_result(tmp_path, make_result(cap_w=300.0, per_gpu=900.0, power_per_gpu_w=300.0))
    write_result(tmp_path, make_result(cap_w=400.0, per_gpu=1000.0, power_per_gpu_w=290.0))
    runs, _ = read_runs([tmp_path])
    [a] = analyse(aggregate(runs, None, 0.05), 0.10)
    assert caps(a.candidates) == [200.0, 300.0, 400.0]
    assert caps(a.pareto) == [200.0, 400.0]  # in order of throughput (the pareto query)


def test_energy_and_time_for_a_fixed_amount_of_work(tmp_path):
    a = analyses(tmp_path)["H100"]
    c300 = next(c for c in a.cells if c.cap_w == 300.0)
    fw = fixed_work(c300, 1e6)
    eff = (40000 / 12200 + 44000 / 12200) / 2  # images per joule, overhead included
    assert fw.energy_j == pytest.approx(1e6 / eff)  # 290,476 J
    assert fw.time_s == pytest.approx(1e6 / 4200)  # node: 4 GPUs x 1050 img/s
    assert fw.energy_x_time_js == pytest.approx(1e6 / eff * 1e6 / 4200)
    assert edp_per_unit(c300) == pytest.approx((1 / eff) * (1 / 4200))
    c200 = next(c for c in a.cells if c.cap_w == 200.0)
    assert edp_per_unit(c200) == pytest.approx((9000 / 32000) / 3200)


def test_no_power_no_recommendation(tmp_path):
    write_result(tmp_path, make_result(device_type="cpu", vendor=None, gpus=2, cap_w=None))
    runs, _ = read_runs([tmp_path])
    (a,) = analyse(aggregate(runs, None, 0.05), 0.1)
    assert a.best is None and a.recommended is None and a.pareto == []
    assert "power was not measured" in a.notes[0]
