"""Labels that said something else than they meant (issue 41, item 12): the settle
phase past its limit, a 95% interval below zero at n = 2, and the "Does the cap
bind?" rows without the site where several sites meet."""
from __future__ import annotations

from hpcai.launcher.report import tables as T
from hpcai.launcher.report.binding_table import binding_table
from hpcai.launcher.report.efficiency import analyse
from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.stats import aggregate
from hpcai.workloads.inrun import _settling
from report_docs import make_result, write_result


def test_the_settle_line_says_why_it_runs_past_its_limit():
    assert _settling(2.5, 3.0) == "settling 2.5 s of at most 3 s"
    assert _settling(49.7, 3.0) == "settling 49.7 s: past its 3 s limit, ends with this epoch"


def _cells(tmp_path, docs):
    for doc in docs:
        write_result(tmp_path, doc)
    return aggregate(read_runs([tmp_path])[0], None, 0.05)


def test_an_interval_below_zero_is_too_few_epochs(tmp_path):
    cells = _cells(tmp_path, [make_result(cap_w=300.0, epochs=[1000.0, 200.0]),
                              make_result(cap_w=400.0, gpu="NVIDIA H200", epochs=[1000.0, 990.0, 1010.0])])
    table = T.stats_table(cells)
    ci = {row[1].text: row[7].text for row in table.rows}
    assert ci["H100 ×4"] == "too few epochs for an interval (n = 2)"
    assert ci["H200 ×4"].startswith("± ") and ci["H200 ×4"].endswith("(n = 3 epochs)")


def test_the_binding_rows_name_the_site_where_several_meet(tmp_path):
    cells = _cells(tmp_path, [make_result(cap_w=300.0, site="alpha"), make_result(cap_w=300.0, site="beta")])
    table = binding_table(analyse(cells, 0.10))
    assert sorted(row[1].text for row in table.rows) == ["H100 ×4 @ alpha", "H100 ×4 @ beta"]


def test_recommendations_csv_holds_numbers(tmp_path):
    import csv

    from hpcai.launcher.report.outputs import write_table_csv

    cells = _cells(tmp_path / "results", [make_result(cap_w=cap, per_gpu=per_gpu, power_per_gpu_w=watts)
                                          for cap, per_gpu, watts in ((300.0, 800.0, 290.0), (500.0, 950.0, 480.0),
                                                                      (700.0, 1000.0, 650.0))])
    table = T.recommendation_table(analyse(cells, 0.10), 0.10)
    with open(write_table_csv(table, tmp_path)) as fh:
        (row,) = list(csv.DictReader(fh))
    caps = [row[k] for k in ("Most efficient cap", "Fastest cap", "Least energy × time")]
    assert all(float(v) in (300.0, 500.0, 700.0) for v in caps), row
    assert float(row["Fastest cap"]) == 700.0
    recommended = next(v for k, v in row.items() if k.startswith("Recommended"))
    assert float(recommended) in (300.0, 500.0, 700.0)
    assert 0 <= float(row["Throughput cost"]) < 1 and "%" not in row["Throughput cost"]


def test_a_gpu_run_where_pytorch_sees_none_does_not_claim_it_was_asked_for(monkeypatch):
    """The launcher plans a GPU run from --device auto too: the error names both ways."""
    import pytest
    import torch

    from hpcai.workloads import distributed
    from hpcai.errors import WorkloadError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(WorkloadError) as info:
        distributed.init("cuda")
    assert "was asked for" not in str(info.value)
    assert "--device auto and the launcher saw GPUs" in str(info.value)


def test_a_small_fleet_s_heat_map_title_fits_its_figure(tmp_path, monkeypatch):
    import random

    from fleet_campaigns import normal_gpu, write_campaign
    from hpcai.launcher.fleet import plots
    from hpcai.launcher.fleet.analysis import analyse
    from hpcai.launcher.fleet.records import load

    title = "throughput at 300 W: robust z-score"
    assert plots.fitted_title(title, 6.0) == title  # an 8-GPU node's map: as before
    assert all(len(line) <= 21 for line in plots.fitted_title(title, 3.0).splitlines())
    rng = random.Random(2)
    folder = write_campaign(tmp_path / "c", [normal_gpu("n01", 1, i, (300.0,), rng) for i in range(2)])
    _, records = load([str(folder)])
    doc = analyse(records, [300.0])
    seen = {}

    def keep(plt, fig, folder, name):
        fig.tight_layout()
        fig.canvas.draw()
        seen["title"], seen["figure"] = fig.axes[0].title.get_window_extent(), fig.bbox
        plt.close(fig)

    monkeypatch.setattr(plots, "_save", keep)
    plots.heatmap(tmp_path / "plots", doc, "300", "throughput")
    title_box, figure_box = seen["title"], seen["figure"]
    assert figure_box.x0 <= title_box.x0 and title_box.x1 <= figure_box.x1, (title_box, figure_box)


def test_the_html_sets_a_notes_command_as_code_not_raw_backticks():
    from hpcai.launcher.report.html import prose, table_html

    table = T.Table("t", "A table", ["a"], [[T.TCell("1", 1.0)]],
                    ["cap the SM clock instead (`hpcai-launch WORKLOAD --sm-clock 1005,1410`)", "`<b>x</b>` & more"])
    html = table_html(table)
    assert "<li>cap the SM clock instead (<code>hpcai-launch WORKLOAD --sm-clock 1005,1410</code>)</li>" in html
    assert "`" not in html
    assert prose("`<b>x</b>` & more") == "<code>&lt;b&gt;x&lt;/b&gt;</code> &amp; more"  # still escaped


def test_site_before_the_subcommand_selects_the_site(monkeypatch):
    import json

    from click.testing import CliRunner

    from hpcai.launcher.cli.hpcai_launch import main

    monkeypatch.setenv("HPCAI_SITE", "unused")  # main sets $HPCAI_SITE: monkeypatch puts it back after
    monkeypatch.delenv("HPCAI_SITE")
    done = CliRunner().invoke(main, ["--site", "example-8xmi300x", "site", "show", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["site"]["name"] == "example-8xmi300x"
    # A command's own --site still wins.
    done = CliRunner().invoke(main, ["--site", "example-8xmi300x", "site", "show", "--json",
                                     "--site", "example-4xh100-sudo"])
    assert json.loads(done.output)["site"]["name"] == "example-4xh100-sudo"
