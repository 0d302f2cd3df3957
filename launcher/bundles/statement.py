"""The in-toto Statement v1 (github.com/in-toto/attestation, spec/v1/statement.md)
a bundle signs: subjects are the bundle's files by SHA-256, the predicate says
what produced them."""
from __future__ import annotations

import hashlib
import json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://hpcai.dev/attestation/result-bundle/v1"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def statement(files: dict[str, bytes], predicate: dict) -> dict:
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": name, "digest": {"sha256": sha256(data)}}
                        for name, data in sorted(files.items())],
            "predicateType": PREDICATE_TYPE,
            "predicate": predicate}


def serialise(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _gpu(g: dict, driver: str | None) -> dict:
    return {"index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid"),
            "serial": g.get("serial"), "memory_total_bytes": g.get("memory_total_bytes"),
            "pci_bus_id": g.get("pci_bus_id"), "driver": driver}


def run_predicate(folder: str, doc: dict, recomputed: dict, image_signature: str | None = None) -> dict:
    """What one run's record says about how it was produced."""
    software = doc.get("software") or {}
    driver = (software.get("gpu_library") or {}).get("driver")
    runtime = doc.get("runtime") or {}
    image = runtime.get("image") if isinstance(runtime.get("image"), dict) else None
    power = doc.get("power") or {}
    stored = doc.get("validity") if isinstance(doc.get("validity"), dict) else {}
    return {
        "folder": folder,
        "run_id": doc.get("run_id"), "workload": doc.get("workload"),
        "preset": (doc.get("spec") or {}).get("preset"), "status": doc.get("status"),
        "site": ((doc.get("spec") or {}).get("site") or {}).get("name"),
        "host": doc.get("host"),
        "hpcai": {"version": software.get("hpcai"), "commit": software.get("hpcai_commit")},
        "runtime": runtime.get("kind"),
        # The run records only the SIF's digest: its signature is checked when bundled
        # (bundles/image_status.py).
        "image": ({"sha256": image.get("sha256"), "labels": image.get("labels"),
                   "signature": image_signature or "not checked"} if image else None),
        "gpus": [_gpu(g, driver) for g in doc.get("gpus") or [] if g.get("used")],
        "driver": software.get("gpu_library"),
        "caps": {"requested_w": (power.get("cap") or {}).get("requested_w"),
                 "enforced": (power.get("cap") or {}).get("enforced"),
                 "limits": (doc.get("launcher") or {}).get("gpu_limits")
                 if isinstance(doc.get("launcher"), dict) else None,
                 "clocks": ((doc.get("spec") or {}).get("power") or {}).get("clocks")},
        "boundaries": {"energy_scope": power.get("energy_scope"),
                       "figures": power.get("boundaries"),
                       "node_power": (power.get("node_power") or {}).get("scope")
                       if isinstance(power.get("node_power"), dict) else None},
        "validity": {"stored": stored.get("verdict"), "recomputed": recomputed.get("verdict"),
                     "failed": recomputed.get("failed")},
    }
