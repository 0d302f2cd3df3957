"""The launcher's part of a result: cap limits and read-backs, the check that
the cap held, and validation against the versioned schema before success.
"""
from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

from hpcai.errors import ResultError

SCHEMA_FILE = "schema/result-v1.schema.json"
# The median is robust to the short spikes a cap lets through by design.
CAP_STATISTIC = "median"


def schema(file: str = SCHEMA_FILE) -> dict:
    return json.loads(resources.files("hpcai").joinpath(file).read_text())


def validation_errors(doc: dict, schema_file: str = SCHEMA_FILE) -> list[str]:
    """Every way doc breaks its schema (a result's, or another of hpcai/schema/)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema(schema_file))
    errors = [f"{e.json_path}: {e.message}" for e in
              sorted(validator.iter_errors(doc), key=lambda e: list(e.path))]
    return errors + non_finite_numbers(doc)


def non_finite_numbers(value, where: str = "$") -> list[str]:
    """NaN and infinities, which Python's json reads but JSON Schema's "number"
    lets through (jsonschema compares NaN with nothing): no result may hold one."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where}: {value} is not a finite number"]
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in non_finite_numbers(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [e for i, v in enumerate(value) for e in non_finite_numbers(v, f"{where}[{i}]")]
    return []


def validate(doc: dict, path: Path | str = "result") -> None:
    errors = validation_errors(doc)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ResultError(f"{path} does not match the result schema: {errors[0]}{more}",
                          "this is a bug in hpcai; please report it with the file")


def load(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ResultError(f"{path} is not valid JSON ({exc})", "the run did not finish writing it") from None


def mark_crashed(doc: dict, exit_code: int) -> None:
    """A result left 'running' means the workload died without finishing it."""
    from hpcai.timestamps import now_iso

    doc["status"] = "failed"
    doc["error"] = {"type": "WorkloadCrashed",
                    "message": f"the workload exited with code {exit_code} while running"}
    doc["timestamps"]["finished"] = now_iso()


def mark_interrupted(doc: dict, why: str) -> None:
    """A result left 'running' by a signal that came before the workload could write one."""
    from hpcai.timestamps import now_iso

    doc["status"] = "interrupted"
    doc["error"] = {"type": "Interrupted", "message": f"{why} before the workload wrote a result"}
    doc["timestamps"]["finished"] = now_iso()


def sweep_idle_baseline(run_dir: Path, in_sweep: bool) -> dict | None:
    """The idle power per GPU that the run's sweep measured before its first run
    (sweep.json beside the run's folder), for the power_range check; None when
    the run is not part of a sweep or the sweep has no usable baseline."""
    if not in_sweep:
        return None
    try:
        idle = json.loads((Path(run_dir).parent / "sweep.json").read_text()).get("idle_baseline") or {}
    except (OSError, ValueError, AttributeError):
        return None
    if not idle.get("available") or idle.get("source") != "gpu":
        return None
    devices = [{"index": d.get("index"), "mean_power_w": d.get("mean_power_w")}
               for d in idle.get("devices") or [] if d.get("index") is not None]
    return {"source": f"sweep idle baseline, {idle.get('seconds', 0):.1f} s", "devices": devices} \
        if devices else None


def limits_record(limits: dict[int, dict], end: dict[int, float | None]) -> list[dict]:
    """Each GPU's enforced limit when the run started (after any cap was set) and
    when the workload ended: an uncapped result on GPUs someone left capped shows."""
    record = []
    for index, lim in sorted(limits.items()):
        start = lim.get("enforced_w")
        record.append({"index": index, "uuid": lim.get("uuid"), "default_w": lim.get("default_w"),
                       "requested_w": lim.get("requested_w"),
                       "enforced_at_start_w": start if start is not None else lim.get("applied_w"),
                       "enforced_at_end_w": end.get(index),
                       "held_by": lim.get("held_by"),
                       "changed_during_run_w": lim.get("changed_during_run_w")})
    return record


def apply_limits(doc: dict, limits: dict[int, dict], cap_w: float | None,
                 tolerance_frac: float) -> None:
    """Per GPU: default/min/max/requested/applied limits and whether the cap held."""
    enforced_all = []
    for gpu in doc.get("gpus", []):
        lim = limits.get(gpu["index"])
        if lim is None:
            gpu["limits"] = {"default_w": None, "min_w": None, "max_w": None,
                             "requested_w": None, "applied_w": gpu.get("power_limit_w")}
            gpu["cap_held"] = None
            continue
        gpu["limits"] = {k: lim.get(k) for k in
                         ("default_w", "min_w", "max_w", "requested_w", "applied_w", "enforced_w")}
        gpu["cap_held"] = None
        if cap_w is not None and gpu.get("used") and lim.get("requested_w") is not None:
            gpu["cap_held"] = cap_held(gpu.get("power_w"), cap_w, tolerance_frac)
            enforced_all.append(gpu["cap_held"])
    known = [e for e in enforced_all if e is not None]
    doc["power"]["cap"] = {
        "requested_w": cap_w,
        "tolerance_frac": tolerance_frac,
        "statistic": CAP_STATISTIC,
        "enforced": (all(known) if known else None) if cap_w is not None else None,
    }


def cap_held(power_w: dict | None, cap_w: float, tolerance_frac: float) -> bool | None:
    """False when the GPU drew more than the cap allows: the cap was not enforced."""
    if not power_w or power_w.get(CAP_STATISTIC) is None:
        return None
    return power_w[CAP_STATISTIC] <= cap_w * (1 + tolerance_frac)
