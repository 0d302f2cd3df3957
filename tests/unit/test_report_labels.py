"""The report says what each number is (issue 14 §6, issue 15 §4): published
figures unrounded, CSV cells as numbers with their flags in columns of their
own, bold explained under every table that uses it, and no column of dashes
where one sentence says why."""
import csv

from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report import tables as T
from hpcai.launcher.report.efficiency import analyse
from hpcai.launcher.report.load import load_reference, read_runs
from hpcai.launcher.report.stats import aggregate
from report_docs import crafted_set, make_result, write_result


def _tables(folder, reference=None):
    runs, _ = read_runs([folder])
    cells = aggregate(runs, None, 0.05)
    analyses = analyse(cells, 0.10)
    return (T.throughput_tables(cells, analyses, reference)
            + T.efficiency_tables(cells, analyses, "overhead")
            + [T.recommendation_table(analyses, 0.10), T.fixed_work_table(analyses, {"images/s": 1e6, "tokens/s": 1e9}),
               T.stats_table(cells)])


def test_published_reference_values_are_printed_as_published(tmp_path):
    write_result(tmp_path, make_result(workload="resnet50", per_gpu=1400.0, cap_w=400.0))
    (table,) = _tables(tmp_path, load_reference())[:1]
    paper = next(r for r in table.rows if r[0].text == "resnet50" and r[1].text == "H100 (paper)")
    # The paper's 1,426.0 images/s per GPU at 400 W, printed as the paper prints it,
    # not as 1426 (a number the paper never wrote).
    assert paper[table.header.index("400 W")].text == "1426.0"
    assert any("exactly as published" in n for n in table.notes)


def test_every_table_with_bold_cells_explains_bold(tmp_path):
    crafted_set(tmp_path)
    tables = [t for t in _tables(tmp_path) if t is not None]
    bold = [t for t in tables if any(c.best for row in t.rows for c in row)]
    assert {t.key for t in bold} >= {"throughput-images", "efficiency-images", "fixed-work"}
    for table in bold:
        assert any("Bold:" in n for n in table.notes), table.key


def test_csv_cells_are_numbers_and_flags_have_their_own_columns(tmp_path):
    crafted_set(tmp_path / "results")
    make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "out"))
    with open(tmp_path / "out" / "throughput-images.csv") as fh:
        rows = list(csv.DictReader(fh))
    h100 = next(r for r in rows if r["GPU"] == "H100 ×4")
    assert h100["300 W"] == "1050.0" and h100["300 W noisy"] == "true"  # not "1050†"
    assert h100["200 W"] == "800.0" and h100["200 W noisy"] == "false"
    mi = next(r for r in rows if r["GPU"] == "MI300X ×4")
    assert mi["200 W"] == "771.68" and mi["200 W cap enforced"] == "false"  # not "(771.68)"
    for row in rows:
        for name, text in row.items():
            if name.endswith(" W") and text:
                float(text)  # every value cell parses as a number
    with open(tmp_path / "out" / "statistics.csv") as fh:
        stats = list(csv.DictReader(fh))
    assert all(float(r["Throughput per GPU"]) > 0 for r in stats)


def test_runs_without_power_get_one_sentence_instead_of_dashes(tmp_path):
    write_result(tmp_path, make_result(device_type="cpu", gpus=2, per_gpu=7.07, cap_w=None,
                                       preset="short"))
    runs, _ = read_runs([tmp_path])
    cells = aggregate(runs, None, 0.05)
    table = T.recommendation_table(analyse(cells, 0.10), 0.10)
    assert table.rows == []
    assert sum("power was not measured" in n for n in table.notes) == 1
    assert "resnet50 (short) on CPU ×2" in table.notes[0]


def test_the_runs_table_prints_no_figure_of_a_run_that_is_not_valid(tmp_path):
    crafted_set(tmp_path)
    runs, _ = read_runs([tmp_path])
    table = T.runs_table(runs)
    col = table.header.index("Throughput per GPU")
    failed = next(r for r in table.rows if r[7].text == "failed")
    assert failed[col].text == "–" and failed[col].value is None  # its 1300 is not a measurement
    assert any(r[col].text == "1150" for r in table.rows)
    assert any("complete, valid" in n for n in table.notes)
