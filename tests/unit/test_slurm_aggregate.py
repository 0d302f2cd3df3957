"""A multi-node run's aggregate from its node results: totals, per GPU,
power summed, and scaling efficiency against a single-node baseline found in
the results folder (matched on the measurement, never on the cap alone)."""
from __future__ import annotations

import json
from pathlib import Path

from hpcai.launcher.run.options import Options
from hpcai.launcher.slurm import aggregate
from hpcai.launcher.slurm.job import Job, SlurmOptions, new_job_doc, node_dir
from hpcai.launcher.slurm.submit import run_slots


def spec(nodes: int | None, cap=None, batch=32) -> dict:
    doc = {"workload": "resnet50", "impl": "torch", "preset": "tiny",
           "params": {"batch_size": batch}, "power": {"cap_w": cap},
           "devices": {"type": "cpu", "nproc": 2},
           "protocol": {"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 3}}
    if nodes:
        doc["slurm"] = {"nodes": nodes, "node_rank": 0, "job_id": "1"}
    return doc


def result(node_tp: float, *, nodes=2, status="complete", cap=None, batch=32, energy=600.0,
           started="2026-11-21T10:00:00") -> dict:
    return {"status": status, "run_id": f"r{node_tp}", "spec": spec(nodes, cap, batch),
            "timestamps": {"started": started}, "host": {"hostname": "h"},
            "config": {"processes": 2},
            "ranks": [{"rank": 0, "device": "cpu-x"}, {"rank": 1, "device": "cpu-x"}],
            "throughput": {"unit": "images/s", "node": node_tp, "per_gpu": node_tp / 2},
            "work": {"measured_units": node_tp * 10},
            "power": {"available": True, "energy_j": energy, "window_s": 10.0,
                      "mean_power_w": energy / 10.0, "node_overhead_w": 100.0}}


def write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def two_node_job(results: Path, cap=None) -> Job:
    opts = Options("resnet50", preset="tiny", cap_w=cap)
    runs, seed = run_slots(opts, 2)
    job = Job(results / "slurm-job", new_job_doc(opts, SlurmOptions(nodes=2), runs, [], seed))
    job.doc["job_id"] = "41"
    job.folder.mkdir(parents=True)
    job.write()
    return job


def test_totals_per_gpu_power_and_scaling(tmp_path):
    job = two_node_job(tmp_path)
    run_id = job.runs[0].run_id
    write(node_dir(job.folder, run_id, 0) / "result.json", result(90.0))
    write(node_dir(job.folder, run_id, 1) / "result.json", result(70.0))
    # Baselines: the newest matching single-node result counts; others do not.
    write(tmp_path / "old" / "result.json", result(100.0, nodes=None, started="2026-01-01"))
    write(tmp_path / "new" / "result.json", result(100.0, nodes=None, started="2026-06-01"))
    write(tmp_path / "capped" / "result.json", result(10.0, nodes=None, cap=300.0))
    write(tmp_path / "bigger-batch" / "result.json", result(10.0, nodes=None, batch=64))
    write(tmp_path / "failed" / "result.json", result(10.0, nodes=None, status="failed",
                                                      started="2027-01-01"))
    doc = aggregate.aggregate(job, 0)
    assert doc["status"] == "complete"
    assert doc["throughput"] == {"unit": "images/s", "total": 160.0, "per_gpu": 40.0,
                                 "per_node": 80.0, "gpus": 4}
    assert doc["power"]["energy_j"] == 1200.0 and doc["power"]["mean_power_w"] == 120.0
    # 1600 images over 1200 J, and with 2 x 100 W x 10 s of node overhead.
    assert doc["power"]["units_per_joule"] == 1600 / 1200
    assert doc["power"]["units_per_joule_with_overhead"] == 1600 / 3200
    assert doc["scaling"]["baseline"]["result"] == str(tmp_path / "new" / "result.json")
    assert doc["scaling"]["efficiency"] == 40.0 / 50.0
    assert aggregate.summary_line(doc).endswith("scaling efficiency 80%")
    assert aggregate.schema_errors(doc) == []
    assert aggregate.schema_errors({**doc, "status": "done"})  # the schema can say no


def test_without_a_baseline_the_reason_is_given(tmp_path):
    job = two_node_job(tmp_path, cap=250.0)
    run_id = job.runs[0].run_id
    for k in (0, 1):
        write(node_dir(job.folder, run_id, k) / "result.json", result(50.0, cap=250.0))
    write(tmp_path / "uncapped" / "result.json", result(100.0, nodes=None))
    doc = aggregate.aggregate(job, 0)
    assert doc["scaling"]["efficiency"] is None
    assert "no complete single-node result" in doc["scaling"]["reason"]


def test_a_missing_or_interrupted_node_makes_it_incomplete(tmp_path):
    job = two_node_job(tmp_path)
    run_id = job.runs[0].run_id
    write(node_dir(job.folder, run_id, 0) / "result.json", result(90.0, status="interrupted"))
    assert aggregate.write(str(job.folder), 0) == 1
    doc = json.loads((job.folder / run_id / "aggregate.json").read_text())
    assert doc["status"] == "incomplete" and doc["throughput"] is None
    assert [n["status"] for n in doc["nodes"]] == ["interrupted", "missing"]
    assert "node 1 missing" in aggregate.summary_line(doc)
    assert aggregate.schema_errors(doc) == []


def test_node_scaling_runs_compare_with_the_jobs_own_one_node_run(tmp_path):
    """--vary nodes: each step's node count, and efficiency against this job's one-node run
    (a one-node result elsewhere in the results folder is not it)."""
    opts = Options("resnet50", preset="tiny", vary=[("nodes", [1, 2])], scaling="strong", seed=1)
    runs, seed = run_slots(opts, 2)
    job = Job(tmp_path / "slurm-job", new_job_doc(opts, SlurmOptions(nodes=2), runs, [], seed))
    job.doc["job_id"] = "42"
    job.folder.mkdir(parents=True)
    job.write()
    one = next(r for r in job.runs if r.nodes == 1)
    two = next(r for r in job.runs if r.nodes == 2)
    write(tmp_path / "other" / "result.json", result(500.0, nodes=None))
    write(node_dir(job.folder, two.run_id, 0) / "result.json", result(90.0))
    write(node_dir(job.folder, two.run_id, 1) / "result.json", result(70.0))
    early = aggregate.aggregate(job, two.index)  # the one-node run has not run yet
    assert early["node_count"] == 2 and early["scaling"]["efficiency"] is None
    assert "not complete (yet)" in early["scaling"]["reason"]
    write(node_dir(job.folder, one.run_id, 0) / "result.json", result(100.0, nodes=1))
    doc = aggregate.aggregate(job, two.index)
    assert doc["scaling"]["mode"] == "strong"
    assert doc["scaling"]["baseline"]["per_gpu"] == 50.0
    assert doc["scaling"]["efficiency"] == (160.0 / 4) / 50.0
    assert aggregate.schema_errors(doc) == []
    base = aggregate.aggregate(job, one.index)
    assert base["node_count"] == 1 and base["scaling"]["efficiency"] == 1.0
