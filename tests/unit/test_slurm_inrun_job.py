"""In-run sweeps under Slurm, without a cluster: when a Slurm sweep runs in-run,
the job file's in-run block, the batch script's single step, where each
segment of a node lands, and the node's exit status (launcher/slurm/inrun_node.py)."""
from __future__ import annotations

import subprocess

import pytest

from hpcai.errors import UsageError
from hpcai.launcher.run.options import Options
from hpcai.launcher.slurm import inrun_node
from hpcai.launcher.slurm.job import Job, SlurmOptions, new_job_doc
from hpcai.launcher.slurm.script import render
from hpcai.launcher.slurm.submit import run_slots
from hpcai.launcher.sweep.slots import Slot
from hpcai.spec import RunSpec
from conftest import one_line_error


def in_run_job(tmp_path, caps=(200.0, 300.0), repeat=1, nodes=2) -> Job:
    opts = Options("resnet50", preset="tiny", caps=list(caps), repeat=repeat, seed=4,
                   in_run=True)
    runs, seed = run_slots(opts, nodes, when="20260101T000000000")
    job = Job(tmp_path / "job", new_job_doc(opts, SlurmOptions(nodes=nodes), runs,
                                            ["hpcai-launch", "x"], seed))
    job.doc["in_run"] = inrun_node.job_block(opts, runs, "20260101T000000000", "tiny", nodes,
                                             job.doc["options"])
    return job


def test_a_slurm_sweep_runs_in_run_by_default_and_never_as_an_array(monkeypatch):
    log = []
    sweep = Options("resnet50", preset="tiny", caps=[200.0, 300.0])
    # As without Slurm: in-run is the default for a cap sweep of a workload that can.
    assert inrun_node.choose(sweep, SlurmOptions(nodes=2), log.append) is True
    # An --array job asked for one task per run: it keeps them, unless --in-run is given.
    assert inrun_node.choose(sweep, SlurmOptions(array=True), log.append) is False
    # One cap, or a grid: one step per run, said in one line for the grid.
    assert inrun_node.choose(Options("resnet50", caps=[300.0], repeat=2), SlurmOptions(),
                             log.append) is False
    assert inrun_node.choose(Options("resnet50", caps=[200.0, 300.0],
                                     vary=[("batch_size", [2, 4])]), SlurmOptions(),
                             log.append) is False
    assert "one process per slot" in log[-1]
    asked = Options("resnet50", preset="tiny", caps=[200.0, 300.0], in_run=True)
    assert inrun_node.choose(asked, SlurmOptions(nodes=2), log.append) is True
    with pytest.raises(UsageError, match="--array makes one task per run"):
        inrun_node.choose(asked, SlurmOptions(array=True), log.append)
    with pytest.raises(UsageError, match="two caps or more"):
        inrun_node.choose(Options("resnet50", caps=[300.0], repeat=2, in_run=True),
                          SlurmOptions(), log.append)
    with pytest.raises(UsageError, match="--vary grid"):
        inrun_node.choose(Options("resnet50", caps=[200.0, 300.0], vary=[("batch_size", [2, 4])],
                                  in_run=True), SlurmOptions(), log.append)
    # Serving measures in-run too, one load wave per segment.
    serve = Options("llama3-8b-inference", caps=[200.0, 300.0])
    assert inrun_node.choose(serve, SlurmOptions(), log.append) is True
    # A workload whose declaration says it cannot measure in-run (every built-in one
    # can today: one declared without it) says so and runs one step per run.
    from test_inrun_waves import cannot_measure_in_run

    cannot_measure_in_run(monkeypatch, "llama3-8b-inference")
    assert inrun_node.choose(serve, SlurmOptions(), log.append) is False
    assert "cannot measure in-run yet" in log[-1]
    assert not inrun_node.choose(Options("resnet50", caps=[200.0, 300.0], in_run=False),
                                 SlurmOptions(), log.append)


def test_the_job_records_one_process_id_and_the_node_options_stay_a_plain_run(tmp_path):
    job = in_run_job(tmp_path)
    assert job.in_run
    assert job.doc["in_run"]["process_run_id"] == "20260101T000000000-resnet50-tiny-2n-inrun"
    assert job.doc["options"]["in_run"] is None and job.doc["options"]["caps"] is None
    # Every node derives the same key (the segments' spec.sweep.key) from the job file.
    again = in_run_job(tmp_path)
    assert again.doc["in_run"]["key"] == job.doc["in_run"]["key"]
    assert in_run_job(tmp_path, caps=(200.0, 250.0)).doc["in_run"]["key"] != job.doc["in_run"]["key"]


def test_the_script_runs_one_step_for_every_run_then_each_runs_aggregate(tmp_path):
    job = in_run_job(tmp_path, repeat=2)
    script = render(job, python="/opt/py/bin/python")
    assert script.count("srun ") == 1
    assert '"${HPCAI[@]}" slurm-node "$JOB_DIR" --in-run\n' in script
    assert "--run" not in script.split("slurm-aggregate")[0]
    assert "for index in 0 1 2 3; do" in script
    assert script.count('slurm-aggregate "$JOB_DIR" --run "$index"') == 1
    # Runs a cancelled step never reached get no aggregate (nor a folder).
    assert "RUN_IDS=(" + " ".join(r.run_id for r in job.runs) + ")" in script
    assert '[ -d "$JOB_DIR/${RUN_IDS[$index]}" ] || continue' in script
    assert "in-run: one step measures every run" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # The aggregates run and the status is the step's, else the first failed aggregate's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    fake_python = bin_dir / "py"
    fake_python.write_text(f'#!/bin/bash\necho "$@" >> {calls}\n'
                           '[ "$3" = slurm-aggregate ] && [ "$6" = 1 ] && exit 5\nexit 0\n')
    fake_python.chmod(0o755)
    (bin_dir / "srun").write_text('#!/bin/bash\n"${@: -6}"\n')
    (bin_dir / "srun").chmod(0o755)
    job.folder.mkdir()
    for run in job.runs[:3]:  # the fourth never started
        (job.folder / run.run_id).mkdir()
    script = render(job, python=str(fake_python))
    done = subprocess.run(["bash", "-c", script], text=True, capture_output=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NUM_NODES": "2",
                               "SLURM_JOB_NODELIST": "n[1-2]"})
    assert done.returncode == 5, done.stderr
    lines = calls.read_text().splitlines()
    assert lines[0].endswith(f"slurm-node {job.folder} --in-run")
    assert [line.split()[-1] for line in lines[1:]] == ["0", "1", "2"]


def test_segment_k_lands_in_run_ks_node_folder(tmp_path):
    job = in_run_job(tmp_path)
    block = {"id": job.folder.name, "key": "k", "in_run": True, "process_run_id": "p"}
    place = inrun_node.segment_place(job, 1, block)
    process = RunSpec.from_json({
        "run_id": "p", "workload": "resnet50", "preset": "tiny", "params": {}, "output_dir": "/o",
        "protocol": {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1,
                     "sample_interval_s": 0.1}, "devices": {"type": "cpu"},
        "power": {"cap_w": None, "method": "auto", "node_overhead_w": 0.0},
        "slurm": {"job_id": "9", "node_rank": 1, "nodes": 2, "run_index": 0}})
    spec = place(process, 1, Slot(job.runs[1].cap_w, 0)).to_json()
    assert spec["run_id"] == job.runs[1].run_id
    assert spec["output_dir"] == str(job.folder / job.runs[1].run_id / "node-1")
    assert spec["sweep"] == {**block, "position": 1, "repeat": 0}
    assert spec["slurm"]["run_index"] == 1 and spec["slurm"]["node_rank"] == 1
    # Placing returned a new spec: the process's is as it was.
    assert (process.run_id, process.output_dir, process.slurm.run_index) == ("p", "/o", 0)


def test_a_node_knows_which_segments_did_not_complete():
    record = inrun_node.NodeSegments(3)
    record.set_run(0, status="running", run_id="a")
    record.set_run(0, quiet=True, status="complete", message=None)
    record.set_run(1, quiet=True, status="interrupted", message="SIGTERM")
    assert record.not_complete() == [(1, "interrupted", "SIGTERM"), (2, "not started", None)]


def test_the_command_line_prints_the_one_step_script_and_writes_nothing(cpu_node):
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "--nodes", "2",
                           "--cap", "200,300", "--in-run", "--dry-run", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("srun ") == 1 and 'slurm-node "$JOB_DIR" --in-run' in done.stdout
    assert not cpu_node.results.exists() or not any(cpu_node.results.iterdir())
    # The default is the same one step; --no-in-run runs one step per run.
    default = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "--cap", "200,300",
                              "--dry-run", "-o", str(cpu_node.results))
    assert default.returncode == 0 and default.stdout.count("srun ") == 1
    plain = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "--cap", "200,300",
                            "--no-in-run", "--dry-run", "-o", str(cpu_node.results))
    assert plain.returncode == 0 and "--in-run" not in plain.stdout


def test_slurm_node_takes_either_a_run_or_the_in_run_sweep(cpu_node, tmp_path):
    job = in_run_job(tmp_path)
    job.folder.mkdir()
    job.write()
    one_line_error(cpu_node.launch("slurm-node", str(job.folder)), "--run N or --in-run")
    one_line_error(cpu_node.launch("slurm-node", str(job.folder), "--run", "0", "--in-run"),
                   "--run N or --in-run")
    # A job that is not in-run refuses --in-run (before anything is read from Slurm).
    job.doc["in_run"] = None
    job.write()
    one_line_error(cpu_node.launch("slurm-node", str(job.folder), "--in-run"),
                   "is not an in-run sweep")
    assert sorted(p.name for p in job.folder.iterdir()) == ["job.json"]
