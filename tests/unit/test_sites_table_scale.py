"""The report's "Comparability across sites" table (launcher/report/origins.py) at
fleet scale: it compares every pair of runs from different sites at one workload
and cap while there are few (MAX_PAIRS), and above that the first run of each
site, with a note, instead of n^2 comparisons that each read two results.
Real result files; no fakes."""
from hpcai.launcher.report import origins
from hpcai.launcher.report.load import kit
from hpcai.launcher.report.store import index
from report_docs import make_result, write_result


def _runs(tmp_path):
    for site, count in (("alpha", 3), ("beta", 2)):
        for i in range(count):
            write_result(tmp_path / "results", make_result(run_id=f"{site}-{i}", site=site,
                                                           cap_w=300.0))
    write_result(tmp_path / "results", make_result(run_id="beta-other-cap", site="beta", cap_w=400.0))
    runs = index(kit(), [tmp_path / "results"]).runs
    origins.mark(runs, {})
    return runs


def _pairs(table):
    return [(row[0].text, row[2].text) for row in table.rows]


def test_few_pairs_are_all_compared_in_the_runs_order(tmp_path):
    table = origins.sites_table(_runs(tmp_path))
    assert _pairs(table) == [(f"alpha-{a}", f"beta-{b}") for a in range(3) for b in range(2)]
    assert len(table.notes) == 1


def test_many_pairs_compare_the_first_run_of_each_site(tmp_path, monkeypatch):
    monkeypatch.setattr(origins, "MAX_PAIRS", 5)  # 3 x 2 = 6 pairs at 300 W: over the limit
    table = origins.sites_table(_runs(tmp_path))
    assert _pairs(table) == [("alpha-0", "beta-0")]
    assert "6 pairs of runs from different sites" in table.notes[-1]
