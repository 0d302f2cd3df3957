"""A report made again into the same folder keeps the plots whose inputs are
unchanged (launcher/report/kept_plots.py), and draws again every plot whose
inputs changed, whose file was edited, replaced by a link or written by someone
else, or whose record cannot be read. Real reports, real matplotlib; no fakes."""
import json
import os

import pytest

from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report.kept_plots import RECORD, KeptPlots
from report_docs import crafted_set, make_result, write_result


def _report(results, out):
    return make_report([results], ReportOptions(output=out))


def _files(out):
    """Each plot file's (inode, mtime_ns): a file drawn again is a new file (renamed over)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted((out / "plots").iterdir()) if p.suffix in (".png", ".svg")}


@pytest.fixture
def made(tmp_path):
    crafted_set(tmp_path / "results")
    out = tmp_path / "out"
    written = _report(tmp_path / "results", out)
    return tmp_path / "results", out, written


def test_a_report_made_again_over_the_same_results_keeps_its_plots(made):
    results, out, first = made
    before, page = _files(out), (out / "report.md").read_text()
    record = json.loads((out / "plots" / RECORD).read_text())
    assert {"cells", "studies"} <= set(record["groups"])
    again = _report(results, out)
    kept = {name: stamp for name, stamp in _files(out).items() if before.get(name) == stamp}
    # The power plot reads a samples file no pickle holds: drawn every time.
    assert set(kept) == set(before) - {"power-timeseries.png", "power-timeseries.svg"}
    assert [(p.name, p.title, p.caption) for p in again["plots"]] == \
        [(p.name, p.title, p.caption) for p in first["plots"]]
    generated = 2  # the line that says when: the rest of the page is the same
    assert (out / "report.md").read_text().splitlines()[generated + 1:] == \
        page.splitlines()[generated + 1:]


def test_a_new_result_draws_the_cells_plots_again(made):
    results, out, _ = made
    before = _files(out)
    write_result(results, make_result(cap_w=250.0, per_gpu=900.0, power_per_gpu_w=240.0))
    _report(results, out)
    after = _files(out)
    assert after["throughput-resnet50.png"] != before["throughput-resnet50.png"]
    assert after["efficiency-resnet50.svg"] != before["efficiency-resnet50.svg"]


def test_an_edited_plot_is_drawn_again(made):
    results, out, _ = made
    png = out / "plots" / "throughput-resnet50.png"
    drawn = png.read_bytes()
    png.write_bytes(b"not the plot that was drawn")
    _report(results, out)
    assert png.read_bytes() == drawn  # Agg draws the same bytes from the same cells


def test_a_plot_replaced_by_a_link_is_never_read_and_is_drawn_again(made, tmp_path):
    results, out, _ = made
    elsewhere = tmp_path / "elsewhere.png"
    png = out / "plots" / "efficiency-resnet50.png"
    drawn = png.read_bytes()
    elsewhere.write_bytes(drawn)  # the same bytes: only the link is wrong
    png.unlink()
    png.symlink_to(elsewhere)
    before = elsewhere.stat().st_mtime_ns
    _report(results, out)
    assert not png.is_symlink() and png.read_bytes() == drawn  # drawn again, as a file
    assert elsewhere.stat().st_mtime_ns == before  # never written through the link


def test_a_plot_others_can_write_is_drawn_again(made):
    results, out, _ = made
    svg = out / "plots" / "clocks-resnet50.svg"
    svg.chmod(0o666)
    before = _files(out)["clocks-resnet50.svg"]
    _report(results, out)
    assert _files(out)["clocks-resnet50.svg"] != before
    assert not svg.stat().st_mode & 0o022  # the new file is ours alone


@pytest.mark.parametrize("record", [b"not json", b'{"version": 1, "groups": {"cells": {"key": 5}}}',
                                    b"[" * 100000])
def test_a_record_that_is_not_ours_draws_everything(made, record):
    results, out, first = made
    (out / "plots" / RECORD).write_bytes(record)
    before = _files(out)
    again = _report(results, out)
    after = _files(out)
    assert all(after[name] != before[name] for name in before)
    assert [p.name for p in again["plots"]] == [p.name for p in first["plots"]]
    assert json.loads((out / "plots" / RECORD).read_text())["version"] == 1


def test_a_recorded_plot_name_outside_the_folder_is_refused(tmp_path):
    from hpcai.launcher.report.kept_plots import _decode

    for name in ("../escape", "a/b", ".kept-plots", ""):
        assert _decode([{"plot": [name, "t", "c"]}], tmp_path) is None
    assert _decode([{"plot": ["fine", "t", "c"]}], tmp_path)[0].png == tmp_path / "fine.png"
    assert _decode({"dict": {"k": [5]}}, tmp_path) is None  # only text and plots


def test_no_digest_means_always_drawn(tmp_path):
    folder = tmp_path / "plots"
    folder.mkdir()
    calls = []
    for _ in range(2):
        kept = KeptPlots(folder)
        kept.draw("g", None, lambda f: calls.append(f) or [])
        kept.save()
    assert len(calls) == 2
    assert json.loads((folder / RECORD).read_text())["groups"] == {}


def test_a_group_with_no_plots_is_kept_by_its_key(tmp_path):
    folder = tmp_path / "plots"
    folder.mkdir()
    calls, values = [], []
    for _ in range(2):
        kept = KeptPlots(folder)
        values.append(kept.draw("g", "same", lambda f: calls.append(f) or ([], ["why"])))
        kept.save()
    assert calls == [folder] and kept.kept == ["g"]
    assert values == [([], ["why"]), [[], ["why"]]]  # kept: as JSON has it, a list


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_plot_another_user_owns_is_drawn_again(made):
    results, out, _ = made
    png = out / "plots" / "throughput-resnet50.png"
    os.chown(png, 12345, 12345)
    before = _files(out)["throughput-resnet50.png"]
    _report(results, out)
    assert _files(out)["throughput-resnet50.png"] != before
    assert png.stat().st_uid == os.geteuid()
