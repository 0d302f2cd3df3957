"""A multi-node run's aggregate, written by the batch script after the run's
srun step: total throughput, throughput per GPU, power and energy summed over
the nodes, and scaling efficiency against a single-node result of the same
measurement found in the results folder.
"""
from __future__ import annotations

import sys
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import ResultError
from hpcai.launcher.run import results
from hpcai.launcher.slurm.job import AGGREGATE_FILE, Job, node_dir
from hpcai.measure.efficiency import units_per_joule

AGGREGATE_VERSION = 1
SCHEMA_FILE = "schema/aggregate-v1.schema.json"


def _gpus(doc: dict) -> int:
    """Devices behind a node's throughput (processes x devices each)."""
    per_process = int((doc.get("config") or {}).get("devices_per_process") or 1)
    return max(1, len(doc.get("ranks") or [])) * per_process


def comparable(spec: dict) -> dict:
    """What a single-node baseline must share with a node of this run (the same
    image, too: another framework build is another measurement)."""
    protocol = spec["protocol"]
    image = (spec.get("runtime") or {}).get("image") or {}
    return {"runtime": [(spec.get("runtime") or {}).get("kind"), image.get("sha256")],
            "workload": spec["workload"], "impl": spec.get("impl"), "preset": spec["preset"],
            "params": spec["params"], "cap_w": spec["power"]["cap_w"],
            "device_type": spec["devices"]["type"], "nproc": spec["devices"]["nproc"],
            "protocol": {k: protocol[k] for k in ("warmup_epochs", "epochs", "steps_per_epoch")}}


def _device(doc: dict) -> str | None:
    ranks = doc.get("ranks") or []
    return ranks[0].get("device") if ranks else None


def find_baseline(results_root: Path, like: dict, skip: Path) -> tuple[dict, Path] | None:
    """The newest complete single-node result of the same measurement."""
    key, device = comparable(like["spec"]), _device(like)
    best = None
    for path in Path(results_root).rglob("result.json"):
        if skip in path.parents:
            continue
        try:
            doc = results.load(path)
        except ResultError:  # half-written or not JSON: simply not a baseline
            continue
        if not doc or doc.get("status") != "complete":
            continue
        spec = doc.get("spec") or {}
        if (spec.get("slurm") or {}).get("nodes", 1) != 1:
            continue
        try:
            if comparable(spec) != key or _device(doc) != device:
                continue
        except (KeyError, TypeError):
            continue
        started = (doc.get("timestamps") or {}).get("started") or ""
        if best is None or started > best[0]:
            best = (started, doc, path)
    return (best[1], best[2]) if best else None


def aggregate(job: Job, index: int) -> dict:
    slot = job.run(index)
    nodes_n = job.nodes_of(slot)
    paths = [node_dir(job.folder, slot.run_id, k) / "result.json" for k in range(nodes_n)]
    docs = [results.load(p) for p in paths]
    nodes = []
    for rank, (path, doc) in enumerate(zip(paths, docs)):
        entry = {"node_rank": rank, "result": str(path.relative_to(job.folder)),
                 "status": doc["status"] if doc else "missing", "host": None,
                 "throughput": None, "gpus": None, "mean_power_w": None}
        if doc:
            entry.update(host=(doc.get("host") or {}).get("hostname"),
                         throughput=doc["throughput"]["node"], gpus=_gpus(doc),
                         mean_power_w=doc["power"].get("mean_power_w"))
        nodes.append(entry)
    complete = all(d and d["status"] == "complete" for d in docs)
    unit = next((d["throughput"]["unit"] for d in docs if d), None)
    doc = {"kind": "hpcai.aggregate", "aggregate_version": AGGREGATE_VERSION,
           "status": "complete" if complete else "incomplete",
           "run_id": slot.run_id, "job_id": job.job_id, "workload": job.doc["workload"],
           "cap_w": slot.cap_w, "repeat": slot.repeat, "created": now_iso(),
           "node_count": nodes_n, "nodes": nodes,
           "throughput": None, "power": None, "scaling": None}
    if not complete:
        return doc
    total = sum(d["throughput"]["node"] for d in docs)
    gpus = sum(_gpus(d) for d in docs)
    doc["throughput"] = {"unit": unit, "total": total, "per_gpu": total / gpus,
                         "per_node": total / nodes_n, "gpus": gpus}
    doc["power"] = _power(docs)
    placed = (docs[0].get("spec") or {}).get("slurm") or {}
    if placed.get("job_id") and placed.get("step_id") is not None:
        # Slurm's own figure for the step (the array task's job id), beside ours.
        from hpcai.launcher.slurm.energy import step_energy

        doc["slurm_energy"] = step_energy(str(placed["job_id"]), str(placed["step_id"]))
    if slot.nodes is not None:  # --vary nodes: against this job's own one-node run
        from hpcai.launcher.slurm.scaling_efficiency import within_job

        doc["scaling"] = within_job(job, slot, doc["throughput"]["per_gpu"])
    else:
        doc["scaling"] = _scaling(job, docs[0], doc["throughput"]["per_gpu"])
    return doc


def _power(docs: list[dict]) -> dict:
    powers = [d["power"] for d in docs]
    if not all(p.get("available") for p in powers):
        return {"available": False, "reason": "power was not measured on every node"}
    energy = sum(p["energy_j"] for p in powers)
    window = max(p["window_s"] for p in powers)
    units = sum(d["work"]["measured_units"] for d in docs)
    overhead_w = sum(p["node_overhead_w"] for p in powers)
    with_node = units_per_joule(units, energy, overhead_w, window)
    basis = f"fixed overhead ({overhead_w:g} W over the nodes)"
    if all((p.get("energy_with_overhead_basis") or "").startswith("measured") for p in powers):
        # Every node measured its own energy (node_power): their sum, not the fixed overhead.
        with_node = units_per_joule(units, sum(p["energy_with_overhead_j"] for p in powers))
        basis = "measured at each node"
    return {"available": True, "reason": None, "energy_j": energy, "window_s": window,
            "mean_power_w": sum(p["mean_power_w"] for p in powers),
            "units_per_joule": units_per_joule(units, energy),
            "units_per_joule_with_overhead": with_node,
            "energy_with_overhead_basis": basis, **_tiers(powers)}


def _tiers(powers: list[dict]) -> dict:
    """The sum stands on its nodes' weakest measurement tier (hpcai/measure/tier.py)."""
    from hpcai.measure.tier import TIERS

    names = [(p.get("tier") or {}).get("tier") or "unstated" for p in powers]
    order = ("unstated", *TIERS)
    return {"tier": min(names, key=order.index), "tiers": sorted(set(names), key=order.index)}


def _scaling(job: Job, first: dict, per_gpu: float) -> dict:
    if job.nodes == 1:
        return {"efficiency": None, "baseline": None, "reason": "a single-node run"}
    found = find_baseline(job.folder.parent, first, job.folder)
    if found is None:
        return {"efficiency": None, "baseline": None,
                "reason": "no complete single-node result of the same workload, preset, "
                          "parameters, cap and processes per node in the results folder"}
    base, path = found
    base_per_gpu = base["throughput"]["per_gpu"]
    return {"efficiency": per_gpu / base_per_gpu if base_per_gpu else None,
            "baseline": {"run_id": base["run_id"], "result": str(path),
                         "per_gpu": base_per_gpu},
            "reason": None}


def write(job_dir: str, index: int) -> int:
    from hpcai.result_document import clean, write_json_atomic

    job = Job.load(job_dir)
    doc = clean(aggregate(job, index))
    path = job.folder / doc["run_id"] / AGGREGATE_FILE
    errors = schema_errors(doc)
    if errors:
        raise ResultError(f"the aggregate does not match its schema: {errors[0]}",
                          "this is a bug in hpcai; please report it with the node results")
    # A step Slurm refused left no run folder: its aggregate still says so.
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, doc)
    print(summary_line(doc) + f"; {path}", file=sys.stderr, flush=True)
    return 0 if doc["status"] == "complete" else 1


def schema_errors(doc: dict) -> list[str]:
    return results.validation_errors(doc, SCHEMA_FILE)


def summary_line(doc: dict) -> str:
    if doc["status"] != "complete":
        states = ", ".join(f"node {n['node_rank']} {n['status']}" for n in doc["nodes"])
        return f"hpcai: run {doc['run_id']} not complete ({states})"
    tp = doc["throughput"]
    line = (f"hpcai: {doc['workload']} on {doc['node_count']} node(s): {tp['total']:.1f} "
            f"{tp['unit']} total, {tp['per_gpu']:.1f} per GPU")
    eff = (doc.get("scaling") or {}).get("efficiency")
    if eff is not None:
        line += f", scaling efficiency {eff:.0%}"
    return line
