"""Every number in every CSV the report writes, on the bench's synthetic set, equals
the numbers the report's Python implementation gave before its figures moved to SQL
over the results index (issue 39 §1).

tests/data/report_golden/ holds the CSVs that code (commit fc3b968, launcher/report/
computing cells, statistics, efficiency, Pareto and caps in Python over `Run`
objects) wrote for bench/report_scaling.py's synthesise(folder, SIZE): 216 results,
12 nodes each sweeping 6 caps with 3 repeats, so 8 device/site groups, two run sets
where two sweeps share a group. Regenerate (only when a change of figures is meant):
    .venv/bin/python tests/unit/test_report_sql_equivalence.py
Paths under the results folder are written as RESULTS/..., so the set is portable.
"""
import csv
import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "report_golden"
SIZE = 216
REL = 1e-12


def _bench():
    spec = importlib.util.spec_from_file_location("report_scaling", ROOT / "bench" / "report_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_csvs(work: Path) -> dict[str, list[list[str]]]:
    """The report's CSVs over the synthetic set, by file name, its paths made portable."""
    from hpcai.launcher.report import ReportOptions, make_report

    results = work / "results"
    _bench().synthesise(results, SIZE)
    make_report([results], ReportOptions(output=work / "report"))
    return {path.name: [[cell.replace(str(results), "RESULTS") for cell in row]
                        for row in csv.reader(path.open(newline=""))]
            for path in sorted((work / "report").glob("*.csv"))}


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _same(golden: str, now: str) -> bool:
    a, b = _number(golden), _number(now)
    if a is None or b is None:
        return golden == now
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_csvs(tmp_path_factory.mktemp("sql-equivalence"))


def test_the_report_writes_the_same_csv_files(made):
    assert sorted(made) == sorted(p.name for p in GOLDEN.glob("*.csv"))


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.csv")))
def test_every_cell_of_each_csv_equals_the_python_reports(made, name):
    golden = list(csv.reader((GOLDEN / name).open(newline="")))
    now = made[name]
    assert now[0] == golden[0], f"{name}: header"
    assert len(now) == len(golden), f"{name}: {len(now)} rows, {len(golden)} before"
    for i, (old_row, new_row) in enumerate(zip(golden, now)):
        assert len(new_row) == len(old_row), f"{name} row {i}"
        for column, old, new in zip(golden[0], old_row, new_row):
            assert _same(old, new), f"{name} row {i} {column}: {new!r}, before {old!r}"


if __name__ == "__main__":  # write the golden set from the code as it is
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        tables = make_csvs(Path(folder))
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for old in GOLDEN.glob("*.csv"):
        old.unlink()
    for name, rows in tables.items():
        with (GOLDEN / name).open("w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(rows)
    print(f"{len(tables)} CSV file(s) in {GOLDEN}", file=sys.stderr)
