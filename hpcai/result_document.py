"""The result document (hpcai/schema/result-v1.schema.json): its skeleton, its
cleaning and its writing, in one place for both sides.

The launcher writes the skeleton as the `running` placeholder before the
workload starts (a signal or crash then marks it, never leaves the result
absent); the workload's entrypoint (workloads/entrypoint.py) fills the same
skeleton with its figures. Every top-level key the schema requires is here,
each with its empty value, so a result that never got a figure still validates.
"""
from __future__ import annotations

import math
from pathlib import Path

SCHEMA_VERSION = "1.1"  # 1.1: power.tier (issue 44); power.profile, spec.power.profile (--power-profile)
KIND = "hpcai.result"


def skeleton(spec: dict, started: str, unit: str) -> dict:
    """The result before any figure: status `running`, every section empty.
    spec: the run spec's JSON; started: when the run started (ISO 8601);
    unit: the workload's unit of work (images, tokens, ...)."""
    from hpcai import provenance

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "status": "running",
        "error": None,
        "run_id": spec["run_id"],
        "workload": spec["workload"],
        "spec": spec,
        "timestamps": {"started": started, "finished": None, "measured_start": None, "measured_end": None},
        "host": provenance.host_info(),
        "software": provenance.hpcai_versions(),
        "runtime": spec.get("runtime", {"kind": "host"}),
        "config": {},
        "protocol": protocol_settings(spec) | {"sample_interval_achieved_s": None, "samples": 0,
                                               "sampler_overhead": None, "epochs_completed": 0,
                                               "measured_epochs_completed": 0},
        "epochs": [],
        "ranks": [],
        "throughput": _no_throughput(unit),
        "work": {"unit": unit, "measured_units": 0, "measured_seconds": 0.0,
                 "first_loss": None, "last_loss": None},
        "gpus": [],
        "cpu_packages": [],
        "power": _no_power(spec),
        "memory": None,
        "workload_metrics": None,
        **({"comparability": spec["comparability"]} if spec.get("comparability") else {}),
        "sidecar": {"samples": None},
    }


def protocol_settings(spec: dict) -> dict:
    """The protocol as the spec asked for it (the result's `protocol` adds what was achieved)."""
    protocol = spec["protocol"]
    return {k: protocol[k] for k in ("warmup_epochs", "epochs", "steps_per_epoch", "sample_interval_s")}


def _no_throughput(unit: str) -> dict:
    from hpcai.measure.stats import throughput_stats

    return {"unit": f"{unit}/s", "node": None, "per_gpu": None, "per_epoch_node": [],
            "stats_node": throughput_stats([]), "achieved_tflops_node": None,
            "peak_tflops_node": None, "fraction_of_peak": None}


def _no_power(spec: dict) -> dict:
    return {
        "available": False,
        "reason": "the workload has written no figures (see the run's status and error)",
        "source": None, "energy_scope": None, "energy_source": None, "notes": [], "quality": None,
        "window_s": None, "energy_j": None, "mean_power_w": None,
        "node_overhead_w": float(spec["power"].get("node_overhead_w", 100.0)),
        "energy_with_overhead_j": None, "energy_with_overhead_basis": None, "boundaries": {},
        "node_power": None, "energy_per_unit_j": None, "units_per_joule": None,
        "units_per_joule_with_overhead": None, "tier": None, "cap_binding": None,
    }


def clean(value):
    """NaN and infinities become null: JSON has no place for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def write(path: Path, doc: dict) -> None:
    """The result document, cleaned, written atomically (write_json_atomic)."""
    write_json_atomic(path, clean(doc))


def write_json_atomic(path: Path, doc: dict) -> None:
    """A run's JSON document (its result, spec.json, a job or sweep record):
    readers see the old file or the new one, never half of one; NaN refused.
    Through hpcai/safe_files.py: the folder opened without following a link, a
    new file made inside it (O_EXCL | O_NOFOLLOW), 0644 less the umask, renamed
    over the name."""
    from hpcai.safe_files import write_json

    write_json(path, doc, indent=2, allow_nan=False)
