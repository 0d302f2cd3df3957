"""The report gives clock caps (--sm-clock/--mem-clock) their own axis: each
clock setting a row of the cap tables and a series of the plots, and a flat
cap x clock table; results without clocks look as they did."""
from hpcai.launcher.report.clocks import clock_table
from hpcai.launcher.report.efficiency import analyse
from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.plots import _labels
from hpcai.launcher.report.stats import aggregate
from hpcai.launcher.report import tables as T
from report_docs import make_result, write_result


def _clocked(sm=None, mem=None, **kw):
    doc = make_result(**kw)
    if sm is not None or mem is not None:
        doc["spec"]["power"]["clocks"] = {"sm_mhz": sm, "mem_mhz": mem}
    return doc


def _cells(folder):
    runs, _ = read_runs([folder])
    return aggregate(runs, None, 0.05)


def test_each_clock_setting_is_a_row_and_caps_stay_the_columns(tmp_path):
    for sm, per_gpu, clock in ((None, 1000.0, 1980.0), (1410, 800.0, 1410.0)):
        for cap in (300.0, 700.0):
            write_result(tmp_path, _clocked(sm, cap_w=cap, per_gpu=per_gpu + cap / 10,
                                            sm_clock=clock))
    cells = _cells(tmp_path)
    (table,) = T.throughput_tables(cells, analyse(cells, 0.10), None)
    labels = [row[0].text for row in table.rows]
    assert labels == ["resnet50, SM 1410 MHz", "resnet50"]  # own clocks last, as "uncapped"
    assert table.header[2:] == ["300 W", "700 W"]
    row = table.rows[0]
    assert row[table.header.index("300 W")].value == 830.0
    series = _labels(cells, False)
    assert sorted(series.values()) == ["H100 ×4, SM 1410 MHz", "H100 ×4, own clocks"]

    flat = clock_table(cells)
    assert flat.header[2:5] == ["SM clock cap", "Memory clock cap", "Power cap"]
    grid = [(r[2].text, r[4].text, r[6].value) for r in flat.rows]
    assert grid == [("1410 MHz", "300 W", 1410.0), ("1410 MHz", "700 W", 1410.0),
                    ("own", "300 W", 1980.0), ("own", "700 W", 1980.0)]


def test_without_clock_caps_nothing_changes(tmp_path):
    write_result(tmp_path, make_result(cap_w=300.0))
    write_result(tmp_path, make_result(cap_w=700.0))
    cells = _cells(tmp_path)
    assert clock_table(cells) is None
    runs, _ = read_runs([tmp_path])
    assert "Clock caps" not in T.runs_table(runs).header
    assert list(_labels(cells, False).values()) == ["H100 ×4"]


def test_the_runs_table_names_each_runs_clock_caps(tmp_path):
    write_result(tmp_path, _clocked(1005, 2619, cap_w=300.0))
    write_result(tmp_path, make_result(cap_w=300.0))
    runs, _ = read_runs([tmp_path])
    table = T.runs_table(runs)
    column = table.header.index("Clock caps")
    assert sorted(r[column].text for r in table.rows) == ["SM 1005 MHz, memory 2619 MHz", "own"]
