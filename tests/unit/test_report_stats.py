"""Cells and their statistics, checked against figures worked out by hand
(see report_docs.crafted_set)."""
import math

import pytest

from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.stats import aggregate, describe
from report_docs import crafted_set, make_result, write_result


def cells_by(tmp_path, overhead=None, noisy_cv=0.05):
    crafted_set(tmp_path)
    runs, _ = read_runs([tmp_path])
    cells = aggregate(runs, overhead, noisy_cv)
    return {(c.group.device, c.cap_w): c for c in cells}, runs


def test_describe_mean_std_and_student_t_interval():
    s = describe([1000.0, 1100.0])
    assert s.n == 2 and s.mean == pytest.approx(1050.0)
    assert s.std == pytest.approx(70.7107, rel=1e-5)
    # t(0.975, 1 dof) = 12.706: half width 12.706 x 70.7107 / sqrt(2) = 635.30
    assert s.half_width == pytest.approx(12.706 * 50.0)
    assert s.cv == pytest.approx(70.7107 / 1050, rel=1e-5)
    three = describe([900.0, 1000.0, 1100.0])
    assert three.half_width == pytest.approx(4.303 * 100 / math.sqrt(3))
    one = describe([5.0])
    assert one.mean == 5.0 and one.std is None and one.ci95 is None


def test_repeats_are_averaged_and_their_interval_used(tmp_path):
    cells, _ = cells_by(tmp_path)
    c = cells[("H100", 300.0)]
    assert [r.per_gpu for r in c.runs] == [1000.0, 1100.0]
    assert c.throughput == pytest.approx(1050.0)
    assert c.basis == "repeats" and c.repeats.n == 2 and c.epochs.n == 6
    assert c.spread.ci95 == pytest.approx((1050 - 635.3, 1050 + 635.3))
    # Efficiency: (40000/12200 + 44000/12200) / 2
    assert c.efficiency.mean == pytest.approx((40000 / 12200 + 44000 / 12200) / 2)
    assert c.gpu_efficiency == pytest.approx((40000 / 11200 + 44000 / 11200) / 2)
    assert c.node_throughput == pytest.approx(4200.0)
    assert c.mean_power_w == pytest.approx(1120.0)
    assert c.sm_clock_mhz == pytest.approx(1650.0) and c.memory_clock_mhz == pytest.approx(2619.0)
    # CV 6.7% > 5%: flagged noisy.
    assert c.noisy and "repeats vary by 6.7%" in c.noise[0]


def test_a_single_run_takes_its_interval_from_its_epochs(tmp_path):
    cells, _ = cells_by(tmp_path)
    c = cells[("H100", 200.0)]
    assert c.basis == "epochs" and c.repeats.n == 1 and c.epochs.n == 3
    assert c.spread.half_width == pytest.approx(4.303 * 10 / math.sqrt(3))
    assert not c.noisy  # epochs vary by 1.25%
    assert c.efficiency.mean == pytest.approx(32000 / 9000)


def test_failed_runs_are_never_averaged(tmp_path):
    cells, runs = cells_by(tmp_path)
    assert ("H100", 500.0) not in cells
    assert [r.status for r in runs if not r.usable] == ["failed"]
    assert sum(len(c.runs) for c in cells.values()) == 7


def test_enforcement_and_a_changed_node_overhead(tmp_path):
    cells, _ = cells_by(tmp_path, overhead=200.0)
    assert cells[("MI300X", 200.0)].enforced is False
    assert cells[("MI300X", 400.0)].enforced is True
    # 32000 images / (8000 J + 200 W x 10 s)
    assert cells[("H100", 200.0)].efficiency.mean == pytest.approx(3.2)


def test_a_noisy_run_and_a_lower_threshold(tmp_path):
    write_result(tmp_path, make_result(cap_w=300.0, per_gpu=1000.0,
                                       epochs=[800.0, 1000.0, 1200.0]))
    runs, _ = read_runs([tmp_path])
    (cell,) = aggregate(runs, None, 0.05)
    assert cell.noisy and "epochs vary by 20.0%" in cell.noise[0]
    (quiet,) = aggregate(runs, None, 0.5)
    assert not quiet.noisy


def test_sites_and_gpu_counts_are_separate_rows(tmp_path):
    write_result(tmp_path, make_result(cap_w=300.0, per_gpu=1000.0))
    write_result(tmp_path, make_result(cap_w=300.0, per_gpu=900.0, site="centre-b"))
    write_result(tmp_path, make_result(cap_w=300.0, per_gpu=950.0, gpus=8))
    runs, _ = read_runs([tmp_path])
    cells = aggregate(runs, None, 0.05)
    assert sorted((c.group.site, c.group.processes, c.throughput) for c in cells) == [
        ("centre-b", 4, 900.0), ("default", 4, 1000.0), ("default", 8, 950.0)]
    assert {c.group.device_label(True) for c in cells} == {
        "H100 ×4 @ centre-b", "H100 ×4 @ default", "H100 ×8 @ default"}


def test_each_node_of_a_multi_node_run_is_its_own_row(tmp_path):
    """A node's figures from a two-node Slurm run include the cost of talking
    across nodes: they are not repeats of the single-node measurement."""
    write_result(tmp_path, make_result(cap_w=300.0, per_gpu=1000.0))
    for rank, per_gpu in enumerate((900.0, 880.0)):
        doc = make_result(cap_w=300.0, per_gpu=per_gpu, run_id=f"two-nodes-{rank}")
        doc["spec"]["slurm"] = {"job_id": "7", "nodes": 2, "node_rank": rank}
        write_result(tmp_path, doc)
    runs, _ = read_runs([tmp_path])
    assert all(r.usable for r in runs)
    cells = aggregate(runs, None, 0.05)
    assert sorted((c.group.nodes, c.throughput) for c in cells) == [(1, 1000.0), (2, 890.0)]
    assert {c.group.device_label() for c in cells} == {"H100 ×4", "H100 ×4 per node, 2 nodes"}


def test_the_cells_query_gives_the_measurement_cores_statistics():
    # report/queries.py computes in SQL what hpcai/measure/stats.py's throughput_stats
    # computes in Python (with its t95, registered): the same figures to 1e-12.
    import random

    from hpcai.measure.stats import throughput_stats

    def close(a, b):
        return a == b or (a is not None and b is not None and abs(a - b) <= 1e-12 * max(abs(a), abs(b)))

    rng = random.Random(7)
    cases = [[], [5.0], [None, 5.0], [0.0, 0.0], [1.0, -1.0], [3.0, None, 3.0], [2.0] * 40]
    cases += [[rng.uniform(1, 100) for _ in range(rng.randint(2, 45))] for _ in range(100)]
    for values in cases:
        known = [v for v in values if v is not None]
        want, got = throughput_stats(known), describe(values)
        assert got.n == want["epochs"], values
        for mine, theirs in ((got.mean, want["mean"]), (got.std, want["std"]), (got.cv, want["cv"]),
                             *zip(got.ci95 or (None, None), want["ci95"] or (None, None))):
            assert close(mine, theirs), (values, mine, theirs)
