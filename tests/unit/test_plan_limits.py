"""launcher/run/plan.py: the one site-range rule, and limits shown but not checked
where no GPU is visible (a dry run on a login node)."""
from pathlib import Path

from hpcai.launcher.run.plan import Node, RunPlan, check_limits, outside_site_range
from hpcai.spec import RunSpec


def site(allowed=None) -> dict:
    return {"power": {"allowed_cap_range_w": allowed, "method": "nvml", "command": {}}}


def test_the_site_range_rule():
    assert outside_site_range(250, site([200, 300])) is None
    assert outside_site_range(200, site([200, 300])) is None  # the range includes its ends
    assert outside_site_range(350, site([200, 300])) == \
        "cap 350 W is outside this site's allowed range 200-300 W"
    assert outside_site_range(5000, site(None)) is None  # no site range: the GPUs' own applies


def test_without_gpus_the_limits_are_noted_not_checked(capsys):
    spec = RunSpec.from_json({
        "run_id": "r", "workload": "resnet50", "preset": "tiny", "params": {},
        "protocol": {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1,
                     "sample_interval_s": 0.1},
        "devices": {"type": "cpu", "gpu_indices": None},
        "power": {"cap_w": None, "method": "nvml", "node_overhead_w": 0.0}}, need_output=False)
    plan = RunPlan(spec, ["true"], site([200, 300]), Node(None, []), Path("journal.json"))
    # Out of the site's range, but no GPU here: the node that runs it refuses it.
    check_limits(plan, [None, 900.0], [(1410, None)])
    err = capsys.readouterr().err
    assert "the cap(s) were not checked" in err and "the clock caps were not checked" in err
    check_limits(plan, [None], [(None, None)])
    assert capsys.readouterr().err == ""
