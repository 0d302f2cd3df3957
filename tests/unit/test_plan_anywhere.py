"""Plan anywhere, run where the GPUs are (issue 15 §3): a dry run with --cap on
a machine without GPUs (a login node) prints the plan and says the caps will be
checked where the run happens; a real run there still refuses."""
import json

from conftest import one_line_error


def test_a_dry_run_with_a_cap_on_a_machine_without_gpus_prints_the_plan(cpu_node):
    done = cpu_node.launch("resnet50", "--cap", "300", "--dry-run", "--json", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout.split("\ncommand: ")[0])
    assert spec["power"]["cap_w"] == 300.0
    assert "cap(s) were not checked" in done.stderr
    assert "where the run happens" in done.stderr
    assert not cpu_node.results.exists()


def test_a_sweep_dry_run_without_gpus_shows_the_schedule(cpu_node):
    done = cpu_node.launch("resnet50", "--cap", "200,300", "--dry-run", "--json", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    schedule = json.loads(done.stdout.split("\ncommand of the first run: ")[0])
    assert sorted(r["cap_w"] for r in schedule["runs"]) == [200.0, 300.0]
    assert "cap(s) were not checked" in done.stderr
    assert not cpu_node.results.exists()


def test_a_real_capped_run_without_gpus_still_refuses(cpu_node):
    one_line_error(cpu_node.launch("resnet50", "--cap", "300", "-o", str(cpu_node.results)),
                   "--cap needs GPUs")
    assert not cpu_node.results.exists()
