"""Campaign folders built from one REAL result document (tests/data/
fleet-result-real.json: the tiny resnet50 run of a `fleet run --local` on the
fake H100 node) with the figures varied per GPU, as the statistics need a
fleet whose figures differ by what a test says, not by CPU load."""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

TEMPLATE = json.loads((Path(__file__).parent / "data" / "fleet-result-real.json").read_text())


def gpu_uuid(node: int, index: int) -> str:
    return f"GPU-{node:08d}-0000-4000-8000-{index:012d}"


def result(uuid: str, index: int, cap: float, *, throughput: float = 100.0,
           power: float | None = None, sm_clock: float = 1980.0, temperature: float = 45.0,
           throttle: dict | None = None, enforced: bool = True, workload: str = "resnet50",
           finished: str = "2026-11-24T23:00:00+00:00") -> dict:
    doc = copy.deepcopy(TEMPLATE)
    power = cap if power is None else power
    gpu = doc["gpus"][0]
    gpu.update(index=index, uuid=uuid, sm_clock_mhz_mean=sm_clock,
               throttle_reasons=throttle or {})
    gpu["power_w"] = {"mean": power, "median": power, "p95": power, "max": power}
    gpu["temperature_c"] = {"mean": temperature, "median": temperature, "p95": temperature,
                            "max": temperature}
    gpu["energy_j"].update(counter=power * 60, integrated=power * 60 * 0.99)
    doc["workload"] = workload
    # The figures held to the records they are made of (bundles/recompute.py
    # figures_consistency): the same units over the seconds this throughput takes.
    doc["throughput"]["per_gpu"] = doc["throughput"]["node"] = throughput
    doc["work"]["measured_seconds"] = doc["work"]["measured_units"] / throughput
    doc["power"]["energy_per_unit_j"] = power / throughput
    doc["power"]["cap"].update(requested_w=cap, enforced=enforced)
    doc["timestamps"]["finished"] = finished
    doc["run_id"] = f"run-{uuid[-4:]}-{cap:g}"
    return doc


def write_campaign(folder: Path, gpus: list[dict], caps=(300.0, 700.0),
                   workload: str = "resnet50", preset: str = "tiny") -> Path:
    """gpus: [{"node", "index", "uuid", "serial", "state", "selftest", "results": [doc]}]."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "campaign.json").write_text(json.dumps({
        "kind": "hpcai.fleet.campaign", "format": 1, "workload": workload, "preset": preset,
        "caps_w": list(caps), "mode": "local", "created": "2026-11-24T22:00:00+00:00",
        "command": []}))
    for g in gpus:
        unit = folder / "nodes" / g["node"] / f"gpu{g['index']}"
        (unit / "runs").mkdir(parents=True, exist_ok=True)
        (unit / "unit.json").write_text(json.dumps({
            "kind": "hpcai.fleet.unit", "format": 1, "node": g["node"], "index": g["index"],
            "uuid": g["uuid"], "name": "NVIDIA H100 80GB HBM3", "serial": g.get("serial"),
            "state": g.get("state", "done"),
            "selftest": g.get("selftest", {"verdict": "ok", "reason": None})}))
        for k, doc in enumerate(g.get("results", [])):
            run = unit / "runs" / f"run{k}"
            run.mkdir()
            (run / "result.json").write_text(json.dumps(doc))
    return folder


def normal_gpu(node: str, node_no: int, index: int, caps, rng: random.Random,
               changes: dict | None = None) -> dict:
    """A GPU like the rest: throughput within 1% of its cap's, power at the cap;
    changes: {cap or "all": {figure: value}} makes it differ."""
    changes = changes or {}
    uuid = gpu_uuid(node_no, index)
    results = []
    for cap in caps:
        fig = {"throughput": 100.0 * (cap / 700.0) ** 0.3 * rng.uniform(0.99, 1.01),
               "temperature": rng.uniform(44.0, 46.0)}
        fig.update(changes.get(cap, changes.get("all", {})))
        results.append(result(uuid, index, cap, **fig))
    return {"node": node, "index": index, "uuid": uuid, "results": results}
