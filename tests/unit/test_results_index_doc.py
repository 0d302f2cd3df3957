"""docs/reference/results-index.md names every column of the index's `files` table
that the store declares for queries (report/store.py COLUMNS), and its example runs."""
import re
from pathlib import Path

import duckdb

from hpcai.launcher.report.store import COLUMNS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "results-index.md"


def test_every_queried_column_is_documented():
    named = set(re.findall(r"`([a-z_0-9]+)`", PAGE.read_text()))
    assert sorted(set(COLUMNS) - named) == []


def test_the_pages_example_query_runs_on_an_index_of_that_layout(tmp_path):
    example = re.search(r'con\.sql\("""(.*?)"""\)', PAGE.read_text(), re.S).group(1)
    con = duckdb.connect(str(tmp_path / "index.duckdb"))
    con.execute("CREATE TABLE files (" + ", ".join(f'"{n}" {t}' for n, t in COLUMNS.items()) + ")")
    con.execute("INSERT INTO files (path, workload, device, site, cap_w, usable, per_gpu, "
                "units_per_joule_with_overhead) VALUES ('a', 'w', 'H100', 's', 300, true, 2.0, 0.5), "
                "('b', 'w', 'H100', 's', 300, true, 4.0, 1.5), ('c', 'w', 'H100', 's', 300, false, 9.0, 9.0)")
    assert con.execute(example).fetchall() == [("w", "H100", "s", 300.0, 2, 3.0, 1.0)]
