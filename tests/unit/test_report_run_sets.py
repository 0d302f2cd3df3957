"""Run sets ("run set 2") over a fleet: which independent runs share a row
(report/stats.py _series) is found without comparing every row with every
other, and gives the rows the first-fit rule gives (issue 15), on random
campaigns as on a fleet's thousands of sweeps."""
import random
from types import SimpleNamespace

from hpcai.launcher.report.stats import _series, origin


def _first_fit(usable, groups):
    """The rule as first written: each origin takes the first row holding none of its caps."""
    series, by_group = {}, {}
    order = sorted(range(len(usable)), key=lambda i: usable[i].started or "")
    for i in order:
        by_group.setdefault(groups[i], {}).setdefault(origin(usable[i]), []).append(usable[i])
    for origins in by_group.values():
        rows, placed = [], []
        for members in origins.values():
            caps = {r.cap_w for r in members}
            index = next((i for i, taken in enumerate(rows) if not taken & caps), None)
            if index is None:
                rows.append(set())
                index = len(rows) - 1
            rows[index] |= caps
            placed.append((index, members))
        if len(rows) > 1:
            for index, members in placed:
                for run in members:
                    series[run.run_id] = f"run set {index + 1}"
    return series


def _run(n, sweep, cap, started):
    return SimpleNamespace(run_id=f"r{n}", sweep_id=sweep, nodes=1, slurm_job=None,
                           cap_w=cap, started=started)


def _campaign(rng, runs):
    caps = [None, 200.0, 300.0, 400.0, 500.0]
    usable, groups = [], []
    for n in range(runs):
        sweep = f"s{rng.randrange(runs // 3 + 1)}" if rng.random() < 0.7 else None
        usable.append(_run(n, sweep, rng.choice(caps), f"2026-11-{rng.randrange(1, 29):02d}"))
        groups.append(rng.choice("ab"))
    return usable, groups


def test_the_rows_are_the_first_fit_rows_on_random_campaigns():
    rng = random.Random(7)
    for _ in range(300):
        usable, groups = _campaign(rng, rng.randrange(1, 40))
        assert _series(usable, groups, False) == _first_fit(usable, groups)


def test_a_fleet_of_sweeps_each_at_every_cap_gets_a_row_each():
    caps = [None, 200.0, 300.0]
    usable = [_run(n, f"sweep{n // 3}", caps[n % 3], f"t{n:06d}") for n in range(6000)]
    series = _series(usable, ["g"] * len(usable), False)
    assert series["r0"] == "run set 1" and series["r5999"] == "run set 2000"
    assert series == _first_fit(usable, ["g"] * len(usable))


def test_combined_runs_have_no_run_sets():
    rng = random.Random(1)
    usable, groups = _campaign(rng, 20)
    assert _series(usable, groups, True) == {}
