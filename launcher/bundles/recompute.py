"""Validity recomputed from what a run stored, never from the verdict it wrote.

The checks of hpcai/measure/validity.py run again with this version's
THRESHOLDS, and two more hold the headline figures to the raw records they
are made of, so a hand-edited number stands out:

- figures_consistency: throughput = measured units / measured seconds (the
  formula of workloads/result.py node_throughput), per GPU = node / devices,
  a single rank's units = its measured epochs' units, units per joule =
  units / energy;
- samples_agreement: each used GPU's mean power over the measured window of
  samples.csv (the telemetry sidecar) against the mean the result states.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from hpcai.measure import validity

# Figures computed from the same numbers agree to rounding; 0.1% leaves room for
# JSON's float round-trip and nothing a hand edit would want.
SAME_FRAC = 1e-3
# Mean power from samples.csv (values rounded to mW) vs the result's: the result
# averages the same readings, so 2% apart is a warning and 10% a failure.
SAMPLES_WARN_FRAC = 0.02
SAMPLES_FAIL_FRAC = 0.10


def recompute(doc: dict, samples_csv: bytes | None) -> dict:
    """The validity block computed now from doc and its samples (None: not kept)."""
    block = validity.evaluate(doc, "recomputed")
    extra = [figures_consistency(doc), *samples_agreement(doc, samples_csv)]
    block["checks"] += extra
    ranks = {"n/a": 0, "pass": 1, "warn": 2, "fail": 3}
    worst = max((c["verdict"] for c in block["checks"]), key=ranks.__getitem__, default="pass")
    block["verdict"] = "pass" if worst == "n/a" else worst
    block["failed"] = sorted({c["name"] for c in block["checks"] if c["verdict"] == "fail"})
    return block


# The checks that hold a result's headline figures to its own records: a result that
# fails one was changed after the run, and no consumer counts it (report, results ls,
# fleet report, check, results verify).
TAMPER_CHECKS = ("figures_consistency", "samples_agreement")


def samples_beside(result: Path, doc: dict) -> bytes | None:
    """The samples file the result names, beside it (never through a link), or None."""
    from hpcai.errors import HpcaiError
    from hpcai.launcher.bundles.files import read_regular

    name = (doc.get("sidecar") or {}).get("samples")
    if not isinstance(name, str) or Path(name).name != name:
        return None
    try:
        return read_regular(Path(result).parent / name, "samples")
    except HpcaiError:
        return None


def tampered(doc: dict, result: Path) -> list[dict]:
    """The failed TAMPER_CHECKS of a result at path result, recomputed now from it and
    its samples: empty when its figures hold to its records."""
    checks = [figures_consistency(doc)]
    if any(c["verdict"] == "fail" for c in checks) or not _states_gpu_power(doc):
        return checks if checks[0]["verdict"] == "fail" else []
    checks += samples_agreement(doc, samples_beside(result, doc))
    return [c for c in checks if c["verdict"] == "fail"]


def _states_gpu_power(doc: dict) -> bool:
    return any(g.get("used") and (g.get("power_w") or {}).get("mean") is not None
               for g in doc.get("gpus") or [] if isinstance(g, dict))


def _apart(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def figures_consistency(doc: dict) -> dict:
    threshold = f"each headline figure within {SAME_FRAC:.1%} of the records it is made of"
    tp, work, power = doc.get("throughput") or {}, doc.get("work") or {}, doc.get("power") or {}
    units, seconds = _number(work.get("measured_units")), _number(work.get("measured_seconds"))
    node, per_gpu = _number(tp.get("node")), _number(tp.get("per_gpu"))
    if node is None or units is None or not seconds:
        return validity.check("figures_consistency", "n/a", None, None, threshold,
                              "no measured throughput to hold to its records")
    pairs = [("throughput.node", node, units / seconds, "measured_units / measured_seconds")]
    devices = _number(tp.get("devices_node"))
    if per_gpu is not None and devices:
        pairs.append(("throughput.per_gpu", per_gpu, node / devices, "node / devices_node"))
    measured = [e for e in doc.get("epochs") or [] if isinstance(e, dict) and not e.get("warmup")]
    if len(doc.get("ranks") or []) == 1 and measured and all(_number(e.get("units")) is not None
                                                             for e in measured):
        # node_throughput keeps only the epochs every rank measured; one rank: all of them.
        pairs.append(("work.measured_units", units, float(sum(e["units"] for e in measured)),
                      "the measured epochs' units"))
    energy, upj = _number(power.get("energy_j")), _number(power.get("units_per_joule"))
    if energy and upj is not None:
        pairs.append(("power.units_per_joule", upj, units / energy, "measured_units / energy_j"))
    worst = max(pairs, key=lambda p: _apart(p[1], p[2]))
    off = _apart(worst[1], worst[2])
    if off <= SAME_FRAC:
        return validity.check("figures_consistency", "pass", off, "fraction", threshold,
                              f"{len(pairs)} figures agree with their records")
    return validity.check("figures_consistency", "fail", off, "fraction", threshold,
                          f"{worst[0]} is {worst[1]:.6g} but {worst[3]} gives {worst[2]:.6g}: "
                          "the figure was changed after the run")


def _sample_means(samples_csv: bytes, t0: float, t1: float) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    reader = csv.DictReader(io.StringIO(samples_csv.decode("utf-8", "replace")))
    for row in reader:
        try:
            t, watts = float(row.get("t") or "nan"), float(row.get("power_w") or "nan")
        except ValueError:
            continue
        if math.isfinite(t) and math.isfinite(watts) and t0 <= t <= t1:
            acc = sums.setdefault(str(row.get("source")), [0.0, 0])
            acc[0] += watts
            acc[1] += 1
    return {name: total / n for name, (total, n) in sums.items() if n}


def samples_agreement(doc: dict, samples_csv: bytes | None) -> list[dict]:
    threshold = (f"samples.csv mean within {SAMPLES_WARN_FRAC:.0%} of the stated mean power "
                 f"(fail above {SAMPLES_FAIL_FRAC:.0%})")
    used = [g for g in doc.get("gpus") or [] if g.get("used") and (g.get("power_w") or {}).get("mean")
            is not None]
    stamps = doc.get("timestamps") or {}
    t0, t1 = _number(stamps.get("measured_start")), _number(stamps.get("measured_end"))
    if not used or t0 is None or t1 is None:
        return [validity.check("samples_agreement", "n/a", None, None, threshold,
                               "no GPU power stated over a measured window")]
    if samples_csv is None:
        named = (doc.get("sidecar") or {}).get("samples")
        return [validity.check("samples_agreement", "warn" if named else "n/a", None, None, threshold,
                               f"{named} (named by the result) is missing: the stated power "
                               "cannot be checked" if named else "the run kept no samples file")]
    means = _sample_means(samples_csv, t0, t1)
    out = []
    for gpu in used:
        subject = f"GPU {gpu.get('index')}"
        stated = float(gpu["power_w"]["mean"])
        seen = means.get(f"gpu{gpu.get('index')}")
        if seen is None:
            out.append(validity.check("samples_agreement", "fail", None, "fraction", threshold,
                                      "samples.csv holds no power reading of this GPU in the "
                                      "measured window", subject))
            continue
        off = _apart(stated, seen)
        verdict = "fail" if off > SAMPLES_FAIL_FRAC else "warn" if off > SAMPLES_WARN_FRAC else "pass"
        out.append(validity.check("samples_agreement", verdict, off, "fraction", threshold,
                                  f"stated {stated:.1f} W, samples.csv {seen:.1f} W", subject))
    return out
