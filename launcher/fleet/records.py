"""Per-GPU records of one or more campaigns: each unit's identity, selftest
and, per cap, the figures of its newest complete result."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.launcher.bundles.recompute import tampered
from hpcai.launcher.fleet.campaign import Campaign, Unit, open_campaign, read_json
from hpcai.launcher.fleet.metrics import CapFigures, figures, used_gpu


@dataclass
class GpuRecord:
    node: str
    index: int
    uuid: str | None
    name: str | None = None
    serial: str | None = None
    state: str = "pending"
    selftest: dict | None = None
    caps: dict = field(default_factory=dict)  # cap_w -> CapFigures
    campaign: str = ""

    def identity(self) -> dict:
        return {"node": self.node, "index": self.index, "uuid": self.uuid, "name": self.name,
                "serial": self.serial, "state": self.state, "campaign": self.campaign}


def result_files(folder: Path) -> list[Path]:
    """Every result.json under folder, without following links."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not (Path(root) / d).is_symlink())
        if "result.json" in files:
            found.append(Path(root) / "result.json")
    return found


def unit_record(unit: Unit, workload: str, campaign: str) -> GpuRecord:
    record = GpuRecord(node=unit.node, index=unit.index, uuid=unit.uuid,
                       name=unit.doc.get("name"), serial=unit.doc.get("serial"),
                       state=unit.state, selftest=unit.doc.get("selftest"), campaign=campaign)
    newest: dict[float, tuple[str, CapFigures]] = {}
    for path in result_files(unit.folder / "runs"):
        doc = read_json(path)
        if not doc or doc.get("kind") != "hpcai.result" or doc.get("status") != "complete":
            continue
        if tampered(doc, path):  # its figures do not hold to its records: edited after the run
            continue
        gpu = used_gpu(doc)
        # A result of another workload or another GPU has no place in this unit.
        if doc.get("workload") != workload or gpu is None or gpu.get("uuid") != unit.uuid:
            continue
        if record.serial is None and isinstance(gpu.get("serial"), str):
            record.serial = gpu["serial"]  # the result read it where the unit did not
        got = figures(doc, str(path))
        if got is None:
            continue
        finished = str((doc.get("timestamps") or {}).get("finished") or "")
        if got.cap_w not in newest or finished > newest[got.cap_w][0]:
            newest[got.cap_w] = (finished, got)
    record.caps = {cap: fig for cap, (_, fig) in sorted(newest.items())}
    return record


def campaign_records(campaign: Campaign) -> list[GpuRecord]:
    return [unit_record(u, campaign.workload, str(campaign.folder)) for u in campaign.units()]


def load(folders: list[str]) -> tuple[list[Campaign], list[GpuRecord]]:
    """Campaigns of one workload and preset, their GPUs once each."""
    campaigns = [open_campaign(f) for f in folders]
    first = campaigns[0]
    for other in campaigns[1:]:
        for key in ("workload", "preset"):
            if other.doc.get(key) != first.doc.get(key):
                raise UsageError(
                    f"campaign {other.folder} measured {key} {other.doc.get(key)}, "
                    f"{first.folder} {first.doc.get(key)}",
                    "report campaigns of one workload and preset together")
    records, seen = [], {}
    for campaign in campaigns:
        for record in campaign_records(campaign):
            key = record.uuid or f"{record.node}/gpu{record.index}"
            if key in seen:
                raise UsageError(f"GPU {key} is in campaigns {seen[key]} and {record.campaign}",
                                 "report them separately, or give the older one as --baseline")
            seen[key] = record.campaign
            records.append(record)
    return campaigns, records
