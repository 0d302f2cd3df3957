"""What a sweep has done: the sweep id (a hash of the measurement, caps
aside) and the slots that already have a result that counts.
"""
from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

from hpcai.launcher.run.options import log
from hpcai.launcher.sweep.slots import Slot, point_of



def measurement_key(spec: dict) -> dict:
    """What must match for two runs to belong to one sweep (everything but the cap)."""
    power = spec["power"]
    return {
        "host": _host(),
        "workload": spec["workload"], "impl": spec.get("impl"), "preset": spec["preset"],
        "params": spec["params"], "devices": spec["devices"],
        # The stall timeout says when to give up on a run, not what it measures.
        "protocol": {k: v for k, v in spec["protocol"].items() if k != "stall_timeout_s"},
        "power": {k: power.get(k) for k in ("method", "cap_tolerance_frac", "node_overhead_w")},
        "site": (spec.get("site") or {}).get("name"), "runtime": spec.get("runtime"),
        "seed": spec.get("seed"),
    }


def key_hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def sweep_id(spec: dict, digest: str) -> str:
    return f"sweep-{_host()}-{spec['workload']}-{spec['preset']}-{digest}"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])


def doc_slot(spec: dict, repeat) -> Slot:
    """The slot a run's spec fills: its cap, clock caps (spec.power.clocks), repeat and grid point."""
    clocks = spec["power"].get("clocks") or {}
    return Slot(spec["power"]["cap_w"], int(repeat), clocks.get("sm_mhz"), clocks.get("mem_mhz"),
                point=point_of(spec.get("sweep") or {}), profile=spec["power"].get("profile"))


def run_slot(run: dict) -> Slot:
    """The slot of a sweep.json run entry (entries without clocks: none were capped)."""
    return Slot(run["cap_w"], run["repeat"], run.get("sm_clock_mhz"), run.get("mem_clock_mhz"),
                point=tuple((run.get("point") or {}).items()), profile=run.get("power_profile"))


def completed_slots(sweep_dir: Path, digest: str) -> dict[Slot, str]:
    """Slots with a result of this sweep that counts: schema-valid, `complete`,
    finished by its launcher, no failed validity check, and trusted (launcher/
    site/trust.py): slot -> run id. Any other attempt stays in its folder, beside the
    one that measures the slot again."""
    from hpcai.launcher.run.results import validation_errors
    from hpcai.launcher.site.trust import HOW_TO_TRUST, untrusted

    done: dict[Slot, str] = {}
    distrusted = []
    for path in sorted(Path(sweep_dir).glob("*/result.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("status") != "complete":
            continue
        sweep = (doc.get("spec") or {}).get("sweep") or {}
        if sweep.get("key") != digest or validation_errors(doc) or not counts_as_done(doc):
            continue
        why = untrusted(path)
        if why:
            distrusted.append(why)
            continue
        done.setdefault(doc_slot(doc["spec"], sweep["repeat"]), doc["run_id"])
    if distrusted:
        log(f"{len(distrusted)} complete result(s) not trusted, measured again: "
            f"{distrusted[0]}{' ...' if len(distrusted) > 1 else ''}; {HOW_TO_TRUST}")
    return done


def counts_as_done(doc: dict) -> bool:
    """A complete result the report would count: its launcher finished it, and no
    validity check failed (such a slot is measured again on resume)."""
    from hpcai.measure.validity import failed_checks

    return isinstance(doc.get("launcher"), dict) and not failed_checks(doc.get("validity"))


def attempts(sweep_dir: Path, digest: str) -> dict[Slot, list[dict]]:
    """Every run folder of this sweep, complete or not, per slot."""
    found: dict[Slot, list[dict]] = {}
    for path in sorted(Path(sweep_dir).glob("*/result.json")):
        try:
            doc = json.loads(path.read_text())
            sweep = doc["spec"]["sweep"]
            if sweep.get("key") != digest:
                continue
            slot = doc_slot(doc["spec"], sweep["repeat"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        entry = {"run_id": doc.get("run_id"), "status": doc.get("status")}
        failed = _failed_check_names(doc)
        if failed:
            entry["failed_checks"] = failed
        found.setdefault(slot, []).append(entry)
    return found


def _failed_check_names(doc: dict) -> list[str]:
    from hpcai.measure.validity import failed_checks

    validity = doc.get("validity") if isinstance(doc.get("validity"), dict) else None
    return list(dict.fromkeys(c.get("name", "?") for c in failed_checks(validity)))


