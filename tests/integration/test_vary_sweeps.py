"""Grid sweeps for real: `--vary gpus=...` and `--vary batch_size=...` run real
PyTorch on the CPU (CPU processes standing for GPUs) once per grid point, cap
and repeat; GPU limits and power come from the FAKE pynvml (tests/fakes), the
only part that cannot exist here. Then `hpcai-launch report` on them."""
import json

import pytest

from conftest import assert_valid_result, one_line_error

pytestmark = pytest.mark.slow
# 30 steps: a measured window well over 1 s, which the validity checks want of a
# run with measured power before the report counts it (hpcai/measure/validity.py);
# 12 steps measured 0.9 s on an idle 2-core machine, and CI failed on it;
# the fixed protocol (sweeps measure adaptively by default): one measured epoch
# has no spread to fail on when a loaded machine makes tiny blocks uneven.
TINY = ["resnet50", "--preset", "tiny", "--device", "cpu", "--runtime", "host",
        "--idle-s", "0.3", "--epochs", "1", "--steps-per-epoch", "30", "--ci-target", "off"]


def sweep_of(node):
    (folder,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    return folder, json.loads((folder / "sweep.json").read_text())


def report_of(node, tmp_path):
    done = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    return json.loads((tmp_path / "report" / "report.json").read_text()), \
        (tmp_path / "report" / "report.md").read_text()


# Four real runs, two of them with two processes: minutes on an idle 2-core machine,
# several times that on a loaded one (it hit the suite's 600 s there), so this test
# and its sweep get room for a machine three times slower.
@pytest.mark.timeout(1800)
def test_vary_gpus_with_caps_runs_every_point_and_reports_device_parallelism(
        fake_nvidia_node, tmp_path, result_schema):
    node = fake_nvidia_node
    args = [*TINY, "--vary", "gpus=1,2", "--cap", "200,300", "--seed", "5",
            "-o", str(node.results)]
    done = node.launch(*args, timeout=1500)
    assert done.returncode == 0, done.stderr
    folder, doc = sweep_of(node)
    assert doc["vary"] == [["gpus", [1, 2]]] and doc["status"] == "complete"
    slots = sorted((r["point"]["gpus"], r["cap_w"]) for r in doc["runs"])
    assert slots == [(1, 200.0), (1, 300.0), (2, 200.0), (2, 300.0)]
    for run in doc["runs"]:
        result = json.loads((folder / run["result"]).read_text())
        assert_valid_result(result, result_schema)
        # On the CPU, `gpus` are the processes that stand for them.
        assert result["spec"]["devices"]["nproc"] == run["point"]["gpus"]
        assert len(result["ranks"]) == run["point"]["gpus"]
        assert result["spec"]["sweep"]["point"] == [["gpus", run["point"]["gpus"]]]
        assert result["power"]["cap"]["requested_w"] == run["cap_w"]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    # Resume: the same command again runs nothing.
    again = node.launch(*args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already complete, skipped") == 4

    rep, md = report_of(node, tmp_path)
    par = [t for k, t in rep["tables"].items() if k.startswith("parallelism-")]
    assert len(par) == 2  # one per cap
    for table in par:
        assert [row[0] for row in table["rows"]] == ["1", "2"]
        assert "is least with" in table["notes"][0]
    assert "## Device parallelism" in md and "time-to-solution is least with" in md
    assert any(p["name"].startswith("parallelism-") for p in rep["plots"])


# Four real runs again (two batch sizes, two repeats): room for a loaded machine.
@pytest.mark.timeout(1800)
def test_vary_batch_size_draws_the_trend_and_keeps_points_apart(cpu_node, tmp_path,
                                                                result_schema):
    node = cpu_node
    done = node.launch(*TINY, "--nproc", "1", "--vary", "batch_size=2,4", "--repeat", "2",
                       "--order", "alternate", "-o", str(node.results), timeout=1500)
    assert done.returncode == 0, done.stderr
    folder, doc = sweep_of(node)
    assert [(r["point"]["batch_size"], r["repeat"]) for r in doc["runs"]] == \
        [(2, 0), (4, 0), (4, 1), (2, 1)]
    for run in doc["runs"]:
        result = json.loads((folder / run["result"]).read_text())
        assert_valid_result(result, result_schema)
        assert result["config"]["batch_size_per_process"] == run["point"]["batch_size"]
    rep, md = report_of(node, tmp_path)
    rows = rep["tables"]["trend-batch_size"]["rows"]
    assert [(r[3], r[4]) for r in rows] == [("2", "2"), ("4", "2")]  # two repeats each
    # The two batch sizes are two cells, never repeats of one.
    assert sorted(c["point"] for c in rep["cells"]) == ["batch_size 2", "batch_size 4"]
    assert all(c["repeats"] == 2 for c in rep["cells"])
    assert "## Trends against problem size" in md
    assert any(p["name"] == "trend-resnet50-batch-size" for p in rep["plots"])


@pytest.mark.parametrize("vary,fragments", [
    (["--vary", "colour=1,2"], ["has no parameter 'colour' to vary", "choose one of: gpus"]),
    (["--vary", "gpus="], ["--vary gpus= has no values"]),
    (["--vary", "batch_size=,"], ["has no values"]),
    (["--vary", "gpus=1,two"], ["'two' is not a whole number"]),
    (["--vary", "nodes=1,2"], ["--vary nodes needs --slurm"]),
    (["--vary", "gpus=1,2", "--nproc", "2"], ["both set it"]),
    (["--scaling", "strong"], ["--scaling only applies with --vary nodes"]),
    (["--vary", "gpus=1,2", "--vary", "gpus=4"], ["given twice"]),
])
def test_bad_vary_is_refused_in_one_line_and_nothing_changes(fake_nvidia_node, vary, fragments):
    node = fake_nvidia_node
    done = node.launch(*TINY, *vary, "--cap", "300", "-o", str(node.results))
    one_line_error(done, *fragments)
    assert not node.results.exists()
    assert node.limits() == [700.0, 700.0]
    assert all(d["set_log"] == [] for d in node.devices())
