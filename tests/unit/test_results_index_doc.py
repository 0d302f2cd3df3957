"""docs/reference/results-index.md names every column of the index's `files` table
that hpcai itself reads (report/store.py COLUMNS, and the Run's fields `results
ls/show/export` query), names no column the table lacks, and its example runs."""
import re
from pathlib import Path

import duckdb

from hpcai.launcher.cli.results_store_cli import EXPORT_COLUMNS, LS_COLUMNS
from hpcai.launcher.report.load import kit
from hpcai.launcher.report.store import COLUMNS, all_columns

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "results-index.md"
# Named on the page, but not columns of `files`: the other table and its columns, the
# registered function, and the names `results export` gives its derived columns.
NOT_COLUMNS = {"meta", "files", "format", "hpcai", "t95", "sha256", "node_throughput"}
# Made by the results query, not stored.
DERIVED = {"counted", "duplicate_of", "sha256", "node_throughput"}


def _named() -> set[str]:
    return set(re.findall(r"`([a-z_0-9]+)`", PAGE.read_text()))


def test_every_column_hpcai_queries_is_documented():
    read = set(COLUMNS) | (set(EXPORT_COLUMNS) | set(LS_COLUMNS)) - DERIVED | {"content_hash", "node"}
    assert sorted(read - _named()) == []


def test_the_page_names_no_column_the_table_lacks():
    assert sorted(_named() - NOT_COLUMNS - set(all_columns(kit()))) == []


def test_the_pages_example_query_runs_on_an_index_of_that_layout(tmp_path):
    example = re.search(r'con\.sql\("""(.*?)"""\)', PAGE.read_text(), re.S).group(1)
    con = duckdb.connect(str(tmp_path / "index.duckdb"))
    con.execute("CREATE TABLE files (" + ", ".join(f'"{n}" {t}' for n, t in all_columns(kit()).items()) + ")")
    con.execute("INSERT INTO files (path, workload, device, site, cap_w, usable, per_gpu, "
                "units_per_joule_with_overhead) VALUES ('a', 'w', 'H100', 's', 300, true, 2.0, 0.5), "
                "('b', 'w', 'H100', 's', 300, true, 4.0, 1.5), ('c', 'w', 'H100', 's', 300, false, 9.0, 9.0)")
    assert con.execute(example).fetchall() == [("w", "H100", "s", 300.0, 2, 3.0, 1.0)]
