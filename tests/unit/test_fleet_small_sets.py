"""Fleet statistics on sets too small for the robust z (issue 41, item 4): two GPUs
45.8% apart are no outliers to the robust z (each is +-0.674 whatever the spread);
the report says so, and a site's expected throughput judges them instead."""
import random
import subprocess
import sys

import pytest

from conftest import one_line_error
from fleet_campaigns import normal_gpu, write_campaign
from hpcai.launcher.fleet.analysis import Settings, analyse
from hpcai.launcher.fleet.records import load
from hpcai.launcher.fleet.stats import MIN_GPUS_TO_FLAG, spread

CAPS = (300.0, 700.0)
LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]


def _two_gpus(tmp_path):
    rng = random.Random(3)
    slow = {"all": {"throughput": 54.2}}  # 45.8% below the other's 100
    gpus = [normal_gpu("n01", 1, 0, CAPS, rng, {"all": {"throughput": 100.0}}),
            normal_gpu("n01", 1, 1, CAPS, rng, slow)]
    return write_campaign(tmp_path / "c", gpus)


def _cli(*args):
    return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("apart", [0.01, 0.458, 10.0])
def test_two_gpus_robust_z_is_0_674_whatever_their_spread(apart):
    s = spread([100.0, 100.0 * (1 + apart)], min_spread=0.0)
    assert [round(abs(s.z(v)), 3) for v in (100.0, 100.0 * (1 + apart))] == [0.674, 0.674]
    assert MIN_GPUS_TO_FLAG == 3
    # Three can: the odd one out of three is as far out as it is.
    assert abs(spread([100.0, 101.0, 150.0]).z(150.0)) > 3.5


def test_a_small_set_says_the_robust_z_cannot_flag_and_nothing_judged_it(tmp_path):
    _, records = load([str(_two_gpus(tmp_path))])
    doc = analyse(records, list(CAPS))
    assert doc["summary"]["pass"] == 2
    assert len(doc["small_sets"]) == 2
    line = doc["small_sets"][0]
    assert line.startswith("2 GPU(s) at 300 W: too few for the robust z to flag anything (it needs 3")
    assert "54.2-100" in line and "--expect-throughput" in line


def test_the_site_s_expected_figure_judges_a_small_set(tmp_path):
    _, records = load([str(_two_gpus(tmp_path))])
    doc = analyse(records, list(CAPS), Settings(expected_throughput=((300.0, 90.0),)))
    by_index = {g["index"]: g for g in doc["gpus"]}
    assert by_index[0]["verdict"] == "pass"
    assert by_index[1]["verdict"] == "fail"
    assert [r["text"] for r in by_index[1]["reasons"]] == [
        "throughput at 300 W 39.8% below the site's expected 90 (54.2)"]
    assert "judged against the site's expected 90 instead" in doc["small_sets"][0]
    assert "nothing judged it" in doc["small_sets"][1]  # 700 W had no expected figure


def test_the_cli_prints_the_note_and_fails_below_the_expected_figure(tmp_path):
    folder = _two_gpus(tmp_path)
    plain = _cli("fleet", "report", str(folder), "-o", str(tmp_path / "r"))
    assert plain.returncode == 0, plain.stderr
    assert "note: 2 GPU(s) at 300 W: too few for the robust z" in plain.stdout
    assert "Note: 2 GPU(s) at 300 W: too few" in (tmp_path / "r" / "fleet.md").read_text()
    judged = _cli("fleet", "report", str(folder), "--expect-throughput", "300=90")
    assert judged.returncode == 1 and "below the site's expected 90" in judged.stdout


@pytest.mark.parametrize("bad", ["300", "300=nan", "x=90", "300=-1", "inf=90"])
def test_a_bad_expected_figure_is_a_usage_error(tmp_path, bad):
    done = _cli("fleet", "report", str(_two_gpus(tmp_path)), "--expect-throughput", bad)
    assert done.returncode == 2
    one_line_error(done, "is not CAP=VALUE")
