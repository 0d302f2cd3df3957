"""Which runs are repeats, and how the plots tell series apart (issue 15 §4)."""
from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report.load import read_runs
from hpcai.launcher.report.plots import _labels, _styles, throughput_plot
from hpcai.launcher.report.stats import aggregate
from report_docs import make_result, write_result


def _cpu(per_gpu, preset="short", **kw):
    return make_result(device_type="cpu", gpus=2, cap_w=None, per_gpu=per_gpu, preset=preset, **kw)


def test_two_separate_runs_of_one_configuration_are_not_repeats(tmp_path):
    # Two `make run`s in a row: neither belongs to a sweep.
    write_result(tmp_path, _cpu(7.07))
    write_result(tmp_path, _cpu(4.60))
    runs, _ = read_runs([tmp_path])
    cells = aggregate(runs, None, 0.05)
    assert [c.repeats.n for c in cells] == [1, 1]
    assert sorted(c.group.series for c in cells) == ["run set 1", "run set 2"]
    # Asked for, they are combined.
    (cell,) = aggregate(runs, None, 0.05, combine_runs=True)
    assert cell.repeats.n == 2


def test_the_runs_of_one_sweep_are_repeats_and_plain_runs_at_other_caps_share_the_row(tmp_path):
    write_result(tmp_path, make_result(cap_w=300.0, repeat=0, sweep_id="s1"))
    write_result(tmp_path, make_result(cap_w=300.0, repeat=1, sweep_id="s1"))
    write_result(tmp_path, make_result(cap_w=400.0))
    cells = aggregate(read_runs([tmp_path])[0], None, 0.05)
    assert {(c.cap_w, c.repeats.n, c.group.series) for c in cells} == {(300.0, 2, ""), (400.0, 1, "")}


def test_two_presets_on_one_device_get_their_own_label_and_colour(tmp_path):
    write_result(tmp_path, _cpu(7.07, preset="short"))
    write_result(tmp_path, _cpu(2.10, preset="tiny"))
    cells = aggregate(read_runs([tmp_path])[0], None, 0.05)
    labels, styles = _labels(cells, False), _styles(cells)
    assert sorted(labels.values()) == ["CPU ×2, short preset", "CPU ×2, tiny preset"]
    assert len({styles[c.group]["color"] for c in cells}) == 2
    plot = throughput_plot(tmp_path / "plots", "resnet50", cells, [], False)
    # Without --reference the caption says nothing of the paper's dashed lines.
    assert "paper" not in plot.caption and "dashed" not in plot.caption


def test_the_caption_mentions_the_paper_only_with_reference(tmp_path):
    write_result(tmp_path / "results", make_result(cap_w=300.0))
    plain = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "a"))
    ref = make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "b", reference=True))
    caption = {w: next(p.caption for p in r["plots"] if p.name.startswith("throughput"))
               for w, r in (("plain", plain), ("ref", ref))}
    assert "paper" not in caption["plain"] and "dashed: the seed paper" in caption["ref"]
