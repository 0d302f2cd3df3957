"""Slurm's ConsumedEnergy for a run's step. No Slurm with an energy plugin can
run here (the CI cluster has no accounting storage and no AcctGatherEnergyType:
this machine has neither RAPL nor a BMC), so the parsing is tested on sacct
output in the format sacct(1) documents for --noheader --parsable2 ('|'
delimited, no trailing '|'), and the command's failures through its process
boundary."""
import subprocess

from hpcai.launcher.slurm.energy import FIELDS, parse_sacct, step_energy

RECORDED = """4242|2|135||COMPLETED
4242.batch|1|135|0|COMPLETED
4242.0|2|121|183422|COMPLETED
4242.1|2|3|0|FAILED
"""


def test_the_steps_consumed_energy():
    out = parse_sacct(RECORDED, "4242.0")
    assert out["consumed_energy_j"] == 183422.0 and out["nodes"] == 2 and out["elapsed_s"] == 121
    assert out["reason"] is None and out["api"] == "sacct ConsumedEnergyRaw"
    assert "not the window" in out["boundary"]


def test_no_energy_plugin_no_line_and_no_value_are_reasons():
    assert "no AcctGatherEnergyType" in parse_sacct(RECORDED, "4242.1")["reason"]
    assert parse_sacct(RECORDED, "4242.7")["reason"] == "sacct has no line for step 4242.7"
    bad = parse_sacct("9.0|1|10|18446744073709551614|COMPLETED\n", "9.0")
    assert bad["consumed_energy_j"] is None and "no-value marker" in bad["reason"]


def test_the_command_and_its_failures():
    seen = []

    def fake_run(cmd, **kw):  # the subprocess boundary: what sacct would print
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "sacct: error: Slurm accounting storage is disabled\n")
    out = step_energy("4242", "0", run=fake_run)
    assert seen[0] == ["sacct", "-j", "4242.0", "--noheader", "--parsable2", f"--format={FIELDS}"]
    assert out["reason"] == "sacct failed: sacct: error: Slurm accounting storage is disabled"

    def missing(cmd, **kw):
        raise FileNotFoundError(cmd[0])
    assert step_energy("1", "0", run=missing)["reason"] == "sacct is not installed here"

    def slow(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])
    assert step_energy("1", "0", run=slow, timeout_s=2)["reason"] == "sacct did not answer within 2 s"


def test_the_aggregate_records_slurms_figure_for_the_step(tmp_path, monkeypatch):
    from test_slurm_aggregate import result, two_node_job, write

    from hpcai.launcher.slurm import aggregate
    from hpcai.launcher.slurm.job import node_dir

    job = two_node_job(tmp_path)
    run_id = job.runs[0].run_id
    for rank in (0, 1):
        doc = result(80.0)
        doc["spec"]["slurm"].update(job_id="4242", step_id="0")
        write(node_dir(job.folder, run_id, rank) / "result.json", doc)
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, RECORDED, ""))
    doc = aggregate.aggregate(job, 0)
    assert doc["slurm_energy"]["consumed_energy_j"] == 183422.0
    assert aggregate.schema_errors(doc) == []
