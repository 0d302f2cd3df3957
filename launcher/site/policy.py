"""The site file's `[[classes]]` rules and `[policy]` section (issue 42 §2).

`[[classes]]` maps a Slurm job to a job-mix class: the first rule whose given
fnmatch globs (job_name, account, qos, hpcai_workload) all match wins.
`[policy]` (written by `hpcai-launch plan`) holds a default cap per partition
and GPU model, and per-class overrides with exactly one setting each. The
prolog (launcher/power/prolog.py), `site check` and the sacct mix
(launcher/slurm/mix.py) read them through this module alone.
"""
from __future__ import annotations

import fnmatch
import math

MATCH_KEYS = ("job_name", "account", "qos", "hpcai_workload")
OVERRIDE_SETTINGS = ("cap_w", "sm_clock_mhz", "power_profile")
SETTING_WORDS = {"cap_w": ("cap", " W"), "sm_clock_mhz": ("SM clock", " MHz"), "power_profile": ("power profile", "")}


def check(raw: dict, invalid) -> None:
    """What the schema cannot say about classes and policy; invalid(where, message, hint)
    makes the ConfigError (sites._check_consistency's)."""
    names = [rule["name"] for rule in raw.get("classes", [])]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise invalid(f"classes[{i}].name", f"{name!r} is given twice", "give each class rule its own name")
    policy = raw.get("policy", {})
    cap_range = raw.get("power", {}).get("allowed_cap_range_w")
    _check_entries(policy.get("default", []), "policy.default", cap_range, invalid)
    _check_entries(policy.get("override", []), "policy.override", cap_range, invalid)
    for i, entry in enumerate(policy.get("override", [])):
        where = f"policy.override[{i}]"
        given = [key for key in OVERRIDE_SETTINGS if key in entry]
        if len(given) != 1:
            raise invalid(where, f"sets {', '.join(given) or 'nothing'}",
                          f"give exactly one of {', '.join(OVERRIDE_SETTINGS)}")
        if entry["class"] not in names:
            raise invalid(f"{where}.class", f"{entry['class']!r} is not a [[classes]] name",
                          f"name one of: {', '.join(names) or '(no [[classes]] rules)'}, or add that rule")


def _check_entries(entries: list, where: str, cap_range, invalid) -> None:
    """Finite numbers, caps within the site's range, one entry per key."""
    seen = set()
    for i, entry in enumerate(entries):
        for key in ("cap_w", "sm_clock_mhz"):
            if key in entry and not math.isfinite(entry[key]):
                raise invalid(f"{where}[{i}].{key}", f"{entry[key]} is not a finite number", "give a number")
        cap = entry.get("cap_w")
        if cap is not None and cap_range and not cap_range[0] <= cap <= cap_range[1]:
            raise invalid(f"{where}[{i}].cap_w", f"{cap:g} W is outside power.allowed_cap_range_w "
                          f"{cap_range[0]:g}-{cap_range[1]:g} W", "pick a cap in the site's range")
        key = (entry["partition"], entry["gpu"].upper(), entry.get("class"))
        if key in seen:
            raise invalid(f"{where}[{i}]", f"a second entry for {_label(entry)}", "keep one entry for it")
        seen.add(key)


def _label(entry: dict) -> str:
    label = f"partition {entry['partition']} on {entry['gpu']}"
    return f"{label}, class {entry['class']}" if entry.get("class") else label


# `hpcai-launch --slurm` names its jobs hpcai-<workload> (launcher/slurm/script.py).
HPCAI_JOB_PREFIX = "hpcai-"


def job_fields(job_name: str | None, account: str | None, qos: str | None) -> dict:
    """A Slurm job's values for the [[classes]] globs; hpcai_workload only for a job
    hpcai-launch submitted (None otherwise, which no rule naming it matches)."""
    workload = job_name[len(HPCAI_JOB_PREFIX):] if job_name and job_name.startswith(HPCAI_JOB_PREFIX) else None
    return {"job_name": job_name, "account": account, "qos": qos, "hpcai_workload": workload or None}


def job_class(classes: list[dict], job: dict) -> str | None:
    """The first rule's name whose given globs all match the job's fields (None: no rule
    matches). A rule naming a key the job lacks does not match."""
    for rule in classes:
        keys = [key for key in MATCH_KEYS if key in rule]
        if all(job.get(key) is not None and fnmatch.fnmatchcase(job[key], rule[key]) for key in keys):
            return rule["name"]
    return None


def setting_for(site: dict, partition: str, gpu: str, class_name: str | None) -> tuple[dict, str] | None:
    """The policy's setting for a job: ({"cap_w": 450.0} or the override's one setting,
    why), the class's override first, else the partition's default; None: the policy
    names neither for this partition and GPU model."""
    policy = site.get("policy") or {}
    same = [e for e in policy.get("override", []) + policy.get("default", [])
            if e["partition"] == partition and e["gpu"].upper() == gpu.upper()]
    for entry in same:
        if class_name is not None and entry.get("class") == class_name:
            key = next(k for k in OVERRIDE_SETTINGS if k in entry)
            return {key: entry[key]}, f"the override for {_label(entry)}"
    for entry in same:
        if "class" not in entry:
            return {"cap_w": float(entry["cap_w"])}, f"the default for {_label(entry)}"
    return None


def policy_entries(site: dict) -> list[tuple[str, dict]]:
    """("policy.default[0]", entry), ... then the overrides, in the file's order."""
    policy = site.get("policy") or {}
    return [(f"policy.{kind}[{i}]", entry) for kind in ("default", "override")
            for i, entry in enumerate(policy.get(kind, []))]


def describe(site: dict) -> list[str]:
    """The policy in force, one line per entry of policy_entries ([] when the site has none)."""
    lines = []
    for _, entry in policy_entries(site):
        key = next(k for k in OVERRIDE_SETTINGS if k in entry)
        value = f"{entry[key]:g}" if isinstance(entry[key], (int, float)) else entry[key]
        what, unit = SETTING_WORDS[key]
        kind = "override" if "class" in entry else "default"
        lines.append(f"{kind} {what} {value}{unit} for {_label(entry)}")
    return lines
