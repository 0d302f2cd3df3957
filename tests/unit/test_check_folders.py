"""`hpcai-launch check` reads what `report` reads: a sweep folder, a Slurm job folder or a
whole results folder means every result.json under it (issue 31: it took only files and
run folders, so the README's `report results/` had no `check results/`)."""
import json

import pytest
from click.testing import CliRunner

from hpcai.launcher.cli.check import result_files
from hpcai.launcher.cli.hpcai_launch import main
from hpcai.launcher.report.load import find_files
from report_docs import make_result, write_result


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    sweep = folder / "sweep-node-resnet50-short-0123456789ab"
    for cap in (200.0, 300.0):
        write_result(sweep, make_result(cap_w=cap, sweep_id="s", repeat=0))
    (sweep / "sweep.json").write_text(json.dumps({"kind": "hpcai.sweep"}))
    write_result(folder, make_result(cap_w=400.0))
    return folder, sweep


def test_check_reads_the_folders_report_reads(results):
    folder, sweep = results
    assert sorted(result_files(str(folder))) == sorted(find_files([folder])[0])
    assert sorted(result_files(str(sweep))) == sorted(find_files([sweep])[0])
    assert len(result_files(str(folder))) == 3 and len(result_files(str(sweep))) == 2
    # A run folder is its own result.json, as before.
    run = next(p for p in sweep.iterdir() if p.is_dir())
    assert result_files(str(run)) == [run / "result.json"]


def headers(output: str) -> list[str]:
    return [line for line in output.splitlines() if " validity " in line and " run crafted-" in line]


def test_check_of_a_sweep_or_results_folder_prints_every_result_and_its_verdict(results):
    folder, sweep = results
    runner = CliRunner()
    for given, count in ((sweep, 2), (folder, 3)):
        done = runner.invoke(main, ["check", str(given)])
        found = headers(done.output)
        assert len(found) == count, done.output
        # Exit status 1 exactly when a result under the folder failed a check.
        assert done.exit_code == (1 if any("validity FAIL" in h for h in found) else 0), done.output
    empty = folder / "empty-sweep"
    empty.mkdir()
    done = runner.invoke(main, ["check", str(empty)])
    assert done.exit_code != 0 and "holds no result.json" in done.output
