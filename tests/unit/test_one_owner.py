"""One rule, one place (issue 39 §2): the moment a record is stamped, the mean of
known values, the median and the quantile each have one implementation, which
every module imports; a second definition under another module fails here."""
from __future__ import annotations

import ast
import re
from datetime import datetime
from pathlib import Path

from hpcai.measure.stats import mean_of_known, median, quantile
from hpcai.timestamps import now_iso

ROOT = Path(__file__).resolve().parents[2]
OWNERS = {"now_iso": "hpcai/timestamps.py", "_now_iso": None, "mean_of_known": "hpcai/measure/stats.py",
          "_mean": None, "median": "hpcai/measure/stats.py", "quantile": "hpcai/measure/stats.py",
          "percentile": None}


def _product_modules():
    for folder in ("hpcai", "launcher", "workloads"):
        yield from (ROOT / folder).rglob("*.py")


def test_each_rule_is_defined_once_in_the_product():
    found = {}
    for path in _product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in OWNERS:
                found.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    expected = {name: [owner] for name, owner in OWNERS.items() if owner}
    assert found == expected


def test_a_stamp_is_utc_to_the_millisecond():
    stamp = now_iso()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", stamp), stamp
    assert datetime.fromisoformat(stamp).utcoffset().total_seconds() == 0


def test_the_one_mean_median_and_quantile():
    assert mean_of_known([1.0, None, 2.0]) == 1.5 and mean_of_known([None]) is None
    assert mean_of_known([0.1] * 10) == 0.1  # exactly rounded, where sum()/n gives 0.09999999999999999
    assert median([3.0, 1.0, 2.0, 10.0]) == 2.5
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5 and quantile([0.0, 10.0], 0.95) == 9.5
