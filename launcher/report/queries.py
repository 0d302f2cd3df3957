"""The report's figures as SQL (issue 39 §1): each cell's statistics over its
runs' values in one query, the cells' Pareto flags and each group's best,
fastest and recommended caps in another. Python keeps what is not a number:
labels, the run-set rule, notes, plots, pages.

The values go in as a long table (cell, run, kind, value): one row per run and
kind, one per epoch for "epochs". Means are exactly rounded sums over the count
(DuckDB's fsum: statistics.fmean's rule), the standard deviation the corrected
two-pass rule of hpcai/measure/stats.py's stdev, and the interval's Student t
quantile is that module's t95, registered as a DuckDB function: one rule, no
second copy of it.
"""
from __future__ import annotations

import duckdb
import numpy as np

from hpcai.measure.stats import t95

# Per cell and kind: n, mean, std, interval and CV, as throughput_stats gives them.
CELL_STATS = """
WITH m AS (SELECT cell, kind, count(*) AS n, fsum(value) / count(*) AS mean
           FROM v GROUP BY cell, kind),
d AS (SELECT cell, kind, any_value(n) AS n, any_value(mean) AS mean,
             fsum(value - mean) AS drift, fsum((value - mean) * (value - mean)) AS squares
      FROM v JOIN m USING (cell, kind) GROUP BY cell, kind),
s AS (SELECT cell, kind, n, mean,
             CASE WHEN n > 1 THEN sqrt(greatest(squares - drift * drift / n, 0) / (n - 1)) END AS std
      FROM d),
h AS (SELECT *, CASE WHEN n > 1 THEN t95(n - 1) * std / sqrt(n) END AS half FROM s)
SELECT cell, kind, n, mean, std, mean - half AS low, mean + half AS high,
       CASE WHEN std IS NOT NULL AND mean <> 0 THEN std / mean END AS cv
FROM h ORDER BY cell, kind
"""

# Per run: the coefficient of variation of its epochs (the noisy-run note).
RUN_CV = """
WITH m AS (SELECT run, count(*) AS n, fsum(value) / count(*) AS mean FROM v
           WHERE kind = $epochs GROUP BY run HAVING count(*) > 1),
d AS (SELECT run, any_value(n) AS n, any_value(mean) AS mean, fsum(value - mean) AS drift,
             fsum((value - mean) * (value - mean)) AS squares
      FROM v JOIN m USING (run) WHERE kind = $epochs GROUP BY run)
SELECT run, sqrt(greatest(squares - drift * drift / n, 0) / (n - 1)) / mean AS cv
FROM d WHERE mean <> 0 ORDER BY run
"""


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory database with t95 registered (hpcai/measure/stats.py's rule)."""
    con = duckdb.connect(":memory:")
    con.create_function("t95", t95, ["BIGINT"], "DOUBLE", side_effects=False)
    return con


# The kinds of value a cell has statistics of (the table holds their index).
KINDS = ("repeats", "epochs", "efficiency", "gpu_efficiency", "node", "power", "sm_clock",
         "memory_clock")


class Values:
    """The long table of values: a column per field, a kind's rows added at once."""

    def __init__(self):
        self.cell: list[int] = []
        self.run: list[int] = []
        self.kind: list[int] = []
        self.value: list[float] = []

    def extend(self, kind: str, cells: list[int], runs: list[int], values: list[float]) -> None:
        self.cell += cells
        self.run += runs
        self.kind += [KINDS.index(kind)] * len(values)
        self.value += values

    def table(self) -> dict:
        return {"cell": np.array(self.cell, dtype=np.int64), "run": np.array(self.run, dtype=np.int64),
                "kind": np.array(self.kind, dtype=np.int64), "value": np.array(self.value, dtype=np.float64)}


# The kinds whose spread a cell shows (the others: their mean only).
SPREAD = ("repeats", "epochs", "efficiency")
FIGURES = ("n", "mean", "std", "low", "high", "cv")
# One row per cell: CELL_STATS's rows side by side, a column per kind and figure.
BY_CELL = "SELECT cell, " + ", ".join(
    f"any_value({figure}) FILTER (WHERE kind = {KINDS.index(kind)}) AS {kind}_{figure}"
    for kind in KINDS for figure in (FIGURES if kind in SPREAD else ("mean",))) \
    + f" FROM ({CELL_STATS}) GROUP BY cell ORDER BY cell"


def cell_statistics(values: Values) -> tuple[dict, dict]:
    """({cell: {"repeats_n": ..., "repeats_mean": ..., ..., "node_mean": ...}},
    {run: its epochs' CV}): a cell with no values of a kind has None for it."""
    con = connect()
    try:
        con.register("v", values.table())
        got = con.execute(BY_CELL).fetchnumpy()
        cvs = con.execute(RUN_CV, {"epochs": KINDS.index("epochs")}).fetchnumpy()
    finally:
        con.close()
    names = [name for name in got if name != "cell"]
    columns = [_known(got[name]) for name in names]
    cells = {cell: dict(zip(names, row)) for cell, row in zip(got["cell"].tolist(), zip(*columns))}
    return cells, dict(zip(cvs["run"].tolist(), cvs["cv"].tolist()))


def _known(column) -> list:
    """A fetched column as Python values, NULL as None."""
    if np.ma.isMaskedArray(column):
        return [None if missing else value
                for value, missing in zip(column.data.tolist(), np.ma.getmaskarray(column).tolist())]
    return column.tolist()


# Per group's candidate cells (pos: their order by cap): which is the most efficient,
# the fastest, the recommended (least energy per unit within the allowed slowdown of
# the fastest), the least energy x time, and the Pareto front of throughput against
# efficiency with its order by throughput. Ties go to the first cap, as max() and
# min() over the caps in order would.
PICKS = """
WITH top AS (SELECT grp, max(tp) AS fastest FROM c GROUP BY grp),
ranked AS (
  SELECT c.grp, c.pos, c.tp,
         row_number() OVER (PARTITION BY c.grp ORDER BY eff DESC, pos) = 1 AS best,
         row_number() OVER (PARTITION BY c.grp ORDER BY tp DESC, pos) = 1 AS fastest,
         row_number() OVER (PARTITION BY c.grp ORDER BY tp >= (1 - $slowdown) * top.fastest DESC,
                            eff DESC, pos) = 1 AS recommended,
         row_number() OVER (PARTITION BY c.grp ORDER BY
             CASE WHEN eff <> 0 AND node <> 0 AND NOT isnan(node) THEN (1 / eff) * (1 / node) ELSE 'inf'::DOUBLE END,
             pos) = 1 AS min_edp,
         NOT EXISTS (SELECT 1 FROM c AS d WHERE d.grp = c.grp AND d.pos <> c.pos
                     AND d.tp >= c.tp AND d.eff >= c.eff AND (d.tp > c.tp OR d.eff > c.eff)) AS pareto
  FROM c JOIN top USING (grp))
SELECT grp, pos, best, fastest, recommended, min_edp, pareto FROM ranked
ORDER BY grp, pareto DESC, tp, pos
"""


def picks(candidates: dict, max_slowdown: float) -> list[tuple]:
    """candidates: columns grp, pos, tp, eff, node (one row per candidate cell);
    rows (grp, pos, best, fastest, recommended, min_edp, pareto), each group's
    Pareto front first and in order of throughput."""
    con = connect()
    try:
        con.register("c", {"grp": np.array(candidates["grp"], dtype=np.int64),
                           "pos": np.array(candidates["pos"], dtype=np.int64),
                           **{k: np.array(candidates[k], dtype=np.float64) for k in ("tp", "eff", "node")}})
        return con.execute(PICKS, {"slowdown": max_slowdown}).fetchall()
    finally:
        con.close()
