"""`hpcai-launch fleet status CAMPAIGN`: how far a campaign has come."""
from __future__ import annotations

import json
from pathlib import Path

import click

from hpcai.launcher.fleet.campaign import STATES, open_campaign
from hpcai.launcher.fleet.records import unit_record


def last_log_line(folder: Path, node: str) -> str:
    """The last line of the node's newest job log: why a job ended without a GPU measured."""
    logs = sorted((p for p in folder.glob(f"{node}-*.out") if not p.is_symlink()),
                  key=lambda p: p.stat().st_mtime)
    if not logs:
        return "no log"
    with logs[-1].open("rb") as fh:
        fh.seek(max(0, logs[-1].stat().st_size - 4096))
        lines = [x.strip() for x in fh.read().decode("utf-8", "replace").splitlines() if x.strip()]
    return lines[-1][:300] if lines else "an empty log"


def status_doc(folder: str) -> dict:
    campaign = open_campaign(folder)
    units = []
    for unit in campaign.units():
        have = unit_record(unit, campaign.workload, str(campaign.folder)).caps
        units.append({"node": unit.node, "index": unit.index, "uuid": unit.uuid,
                      "state": unit.state, "reason": unit.doc.get("reason"),
                      "caps_done": [c for c in campaign.caps if c in have],
                      "updated": unit.doc.get("updated")})
    expected = campaign.doc.get("expected_nodes") or []
    seen = {u["node"] for u in units}
    jobs = {}
    if campaign.doc.get("slurm"):
        from hpcai.errors import SlurmError
        from hpcai.launcher.fleet.slurm import job_states

        try:
            jobs = job_states(campaign)
        except SlurmError as exc:  # status still shows what is on disk
            jobs = {node: f"unknown ({exc.one_line()})" for node in expected}
        for node, state in jobs.items():
            if state == "ended" and node not in seen:
                jobs[node] = f"ended: {last_log_line(campaign.folder / 'slurm', node)}"
    counts = {s: sum(1 for u in units if u["state"] == s) for s in STATES}
    return {"campaign": str(campaign.folder), "workload": campaign.workload,
            "preset": campaign.doc.get("preset"), "caps_w": campaign.caps,
            "gpus": len(units), "states": {k: v for k, v in counts.items() if v},
            "nodes_not_started": sorted(n for n in expected if n not in seen),
            "jobs": jobs,
            "slurm": campaign.doc.get("slurm"), "units": units}


def show(folders: list[str], as_json: bool) -> int:
    docs = [status_doc(f) for f in folders]
    if as_json:
        click.echo(json.dumps(docs if len(docs) > 1 else docs[0], indent=2))
        return 0
    for doc in docs:
        states = ", ".join(f"{n} {s}" for s, n in doc["states"].items()) or "no GPU yet"
        click.echo(f"{doc['campaign']}: {doc['workload']} ({doc['preset']}) at "
                   f"{', '.join(f'{c:g} W' for c in doc['caps_w'])}: {doc['gpus']} GPU(s): "
                   f"{states}")
        for node in doc["nodes_not_started"]:
            job = doc["jobs"].get(node)
            click.echo(f"  {node}: not started" + (f"; its job: {job}" if job else ""))
        for u in doc["units"]:
            caps = ",".join(f"{c:g}" for c in u["caps_done"]) or "-"
            why = f"  {u['reason']}" if u["reason"] else ""
            click.echo(f"  {u['node']:<16} gpu{u['index']:<3} {u['state']:<15} caps done: "
                       f"{caps:<16}{why}")
    return 0
