"""report/queries.py's picks (best, fastest, recommended, least-EDP cap and the Pareto
front) against the rules as the report computed them in Python before the query
(max/min over the caps in order, ties to the first cap), over random groups with
many ties: the query must pick the same cells."""
import random

from hpcai.launcher.report.queries import picks


def python_rules(cells: list[tuple], max_slowdown: float) -> dict:
    """cells: (tp, eff, node) in cap order; the Python report's choices, as positions."""
    def edp(c):
        tp, eff, node = c
        return (1 / eff) * (1 / node) if eff and node else float("inf")

    pos = range(len(cells))
    fastest_tp = max(c[0] for c in cells)
    allowed = [i for i in pos if cells[i][0] >= (1 - max_slowdown) * fastest_tp]
    front = [i for i in pos if not any(
        j != i and cells[j][0] >= cells[i][0] and cells[j][1] >= cells[i][1]
        and (cells[j][0] > cells[i][0] or cells[j][1] > cells[i][1]) for j in pos)]
    return {"best": max(pos, key=lambda i: cells[i][1]), "fastest": max(pos, key=lambda i: cells[i][0]),
            "recommended": max(allowed, key=lambda i: cells[i][1]),
            "min_edp": min(pos, key=lambda i: edp(cells[i])),
            "pareto": sorted(front, key=lambda i: cells[i][0])}


def query_rules(groups: list[list[tuple]], max_slowdown: float) -> list[dict]:
    columns = {"grp": [], "pos": [], "tp": [], "eff": [], "node": []}
    for grp, cells in enumerate(groups):
        for pos, (tp, eff, node) in enumerate(cells):
            for key, value in zip(columns, (grp, pos, tp, eff, node)):
                columns[key].append(value)
    chosen = [{"pareto": []} for _ in groups]
    for grp, pos, *flags, pareto in picks(columns, max_slowdown):
        for role, flag in zip(("best", "fastest", "recommended", "min_edp"), flags):
            if flag:
                chosen[grp][role] = pos
        if pareto:
            chosen[grp]["pareto"].append(pos)
    return chosen


def test_the_picks_query_chooses_as_the_python_rules_did():
    rng = random.Random(39)
    levels = [1.0, 2.0, 2.0, 3.0, 4.5]  # few values: many ties
    groups = [[(rng.choice(levels), rng.choice(levels) / 10, rng.choice([None, 0.0, 1.0, 2.0, 3.0]))
               for _ in range(rng.randint(1, 7))] for _ in range(300)]
    for slowdown in (0.0, 0.10, 0.5):
        got = query_rules(groups, slowdown)
        for cells, chosen in zip(groups, got):
            assert chosen == python_rules(cells, slowdown), (cells, slowdown)


def test_a_group_of_one_cell_is_its_own_every_pick():
    [chosen] = query_rules([[(5.0, 0.5, 5.0)]], 0.1)
    assert chosen == {"best": 0, "fastest": 0, "recommended": 0, "min_edp": 0, "pareto": [0]}
