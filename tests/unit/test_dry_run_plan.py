"""`--dry-run` prints a plan a person reads (issue 41, item 5): the runs in their
order with their caps, and the wall time the protocol allows; the JSON only with
`--json`; `--json` without `--dry-run` is a usage error."""
import json

from conftest import one_line_error
from hpcai.launcher.cli.dry_run import duration, measured_bounds, wall_time


def test_an_18_run_sweep_is_a_plan_of_its_runs_with_a_wall_time(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--preset", "tiny", "--cap", "200:700:100", "--repeat", "3",
                       "--seed", "5", "--dry-run", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert not done.stdout.lstrip().startswith("{")  # no JSON unless asked
    assert lines[0].startswith("sweep sweep-") and "18 run(s), 18 to run" in lines[0]
    assert "caps " in lines[0] and "order shuffle (seed 5)" in lines[0]
    runs = [ln for ln in lines if ln.strip()[:1].isdigit()]
    assert len(runs) == 18 and all(ln.endswith(": to run") for ln in runs)
    (estimate,) = [ln for ln in lines if "estimated wall time:" in ln]
    # tiny: a 1-8 s window plus up to 3 s settling per run, 5 s idle baseline once.
    assert "23 s to 3 min" in estimate and "18 × a 1-11 s window" in estimate
    assert lines[-1] == "(add --json for this plan as JSON)"
    assert len(lines) < 30
    assert not node.results.exists() or not any(node.results.iterdir())  # nothing written


def test_json_gives_the_plan_as_before(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--preset", "tiny", "--cap", "200,300", "--dry-run", "--json",
                       "-o", str(node.results))
    plan = json.loads(done.stdout.split("\ncommand of the first run: ")[0])
    assert sorted(r["cap_w"] for r in plan["runs"]) == [200.0, 300.0]


def test_a_single_run_s_plan_says_its_fixed_protocol_is_not_estimated(cpu_node):
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--dry-run", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    assert "protocol: 1 warm-up + 2 measured epochs of 2 steps" in done.stdout
    assert "estimated wall time: not estimated: the fixed protocol" in done.stdout
    assert "{" not in done.stdout


def test_json_without_dry_run_is_refused(cpu_node):
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--json", "-o", str(cpu_node.results))
    assert done.returncode == 2
    one_line_error(done, "--json goes with --dry-run")


def test_the_estimate_from_the_protocol():
    adaptive = {"ci_target": 0.02, "min_window_s": 30.0, "max_window_s": 600.0, "settle_max_s": 120.0}
    assert measured_bounds(adaptive) == (30.0, 720.0)
    assert measured_bounds({"ci_target": None, "epochs": 5}) is None
    assert wall_time(adaptive, 18, 5.0).startswith("9 min to 3 h 36 min")
    assert wall_time(adaptive, 0, 5.0).startswith("0 s to 0 s")  # all done: nothing to wait for
    assert [duration(s) for s in (45, 600, 7500)] == ["45 s", "10 min", "2 h 05 min"]
