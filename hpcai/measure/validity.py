"""Validity checks: why a result can be trusted, check by check.

Pure: every check reads only the result document (no I/O, no GPU library),
so the workload computes `validity` when it writes its result, the launcher
computes it again once it has added its own block (the enforced limits, the
sweep's idle baseline), and `hpcai-launch check` and the report can compute
it for any result file.

Each check is {name, subject, value, unit, threshold, verdict, note}; the
verdict is pass, warn, fail or n/a (does not apply: a CPU run has no GPU to
check). The overall verdict is the worst one. A result with a failed check is
never averaged into a report figure.

Every threshold lives in THRESHOLDS below, with why it has its value; the
documentation renders them at build time (docs/reference/validity-thresholds.md).
"""
from __future__ import annotations

import math

from hpcai.gpu.base import LIMIT_MATCH_W
from hpcai.measure import adaptive
from hpcai.measure.stats import median

VERSION = 1

# name -> value. Where a peer's validator or a sensor's documentation fixes a
# value, its source is named.
THRESHOLDS = {
    # Measured window, s. Below 1 s the window is shorter than NVML's own 1 s
    # power average on Ampere and newer ("power averaged over 1 sec interval",
    # nvmlDeviceGetPowerUsage): the energy is mostly the sensor's smear. Below
    # 10 s the sensor's partial sampling dominates (only ~25% of runtime is
    # sampled on A100/H100, Yang et al., arXiv:2312.02741); ML.ENERGY's
    # validator wants >= 30 s of steady state, MLPerf >= 60 s.
    "window_fail_s": 1.0,
    "window_warn_s": 10.0,
    # Power samples in the window / (window / requested interval).
    "coverage_fail_frac": 0.5,
    "coverage_warn_frac": 0.9,
    # Achieved sampling interval (median), s: MLPerf Training Power asks for at
    # least one sample a second; slower than 1.5x the requested one is a warning.
    "interval_fail_s": 1.0,
    "interval_warn_ratio": 1.5,
    # |counter - integrated| / integrated energy per GPU. 0.25 is the point where
    # the result already stops trusting the counter (result.ENERGY_AGREEMENT_FRAC).
    "energy_warn_frac": 0.10,
    "energy_fail_frac": 0.25,
    # Per-GPU power: p95 at most the maximum limit x 1.05 (a board above its
    # own maximum limit is a broken sensor or a broken cap), read over the limit's
    # own 1 s window where the samples are instant ones; mean at least the
    # idle baseline (a GPU drawing idle power is not running the benchmark).
    "power_max_factor": 1.05,
    # Enforced limit vs requested cap, W: NVML sets limits in mW and amdsmi in
    # µW, so a cap that held reads back within a watt (hpcai/gpu/base.py, which the
    # cap session, the sudo helper and the receipts read too).
    "limit_match_w": LIMIT_MATCH_W,
    # Mean GPU utilisation while measuring, %. milabench's usage validation only
    # asks for load above 1% and memory above 50% (milabench/validation/usage.py,
    # load_threshold 0.01, mem_threshold 0.50); a benchmark built to load the GPU
    # that keeps it busy less than half the time is starved (data, host, client).
    "utilisation_fail_pct": 50.0,
    "utilisation_warn_pct": 80.0,
    # Hottest reading, °C: H100/MI300X slow down near 85-90 °C.
    "temperature_warn_c": 85.0,
    "temperature_fail_c": 95.0,
    # Share of readings with a thermal or hardware slowdown reason; a power-cap
    # reason is what a cap does, not a fault.
    "thermal_throttle_warn_frac": 0.0,
    "thermal_throttle_fail_frac": 0.05,
    # Throughput coefficient of variation over measured epochs: above 5% the
    # report already marks a figure noisy; above 50% the epochs disagree too
    # much for any mean to stand for them.
    "cv_warn": 0.05,
    "cv_fail": 0.50,
    # ... and only fails a run with at least this many measured epochs.
    "cv_fail_min_epochs": 3,
    # Slowest measured epoch / median of the other measured epochs (issue 25): the
    # CV cannot catch one stalled epoch among few (4 epochs at 100, 100, 100, 40
    # give a CV of 0.35, under cv_fail). Run-to-run noise on a GPU is a few % (the
    # CV warns at 5%); an epoch at half the others' throughput spent as long
    # again doing nothing: a stall (a hung rank, a paused job), not noise.
    "slow_epoch_warn_frac": 0.8,
    "slow_epoch_fail_frac": 0.5,
    # Settle drift (in-run segments): the settle record's own thresholds when it
    # has them, else these (temperature slope in °C and power slope as a share
    # of mean power, over the settle window); above 3x them: fail.
    "settle_temperature_c": 0.5,
    "settle_power_frac": 0.01,
    "settle_fail_factor": 3.0,
}
# Throttle reasons that are a fault (hpcai.gpu.nvidia.THROTTLE_BITS, hpcai.gpu.amd.VIOLATIONS).
THERMAL_REASONS = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "vr_thermal",
                   "hbm_thermal")
VERDICTS = ("pass", "warn", "fail", "n/a")
_RANK = {"n/a": 0, "pass": 1, "warn": 2, "fail": 3}


def check(name: str, verdict: str, value=None, unit: str | None = None, threshold: str | None = None,
          note: str | None = None, subject: str = "run") -> dict:
    return {"name": name, "subject": subject, "value": value, "unit": unit,
            "threshold": threshold, "verdict": verdict, "note": note}


def evaluate(doc: dict, evaluated_by: str = "workload") -> dict:
    """The `validity` block of a result document."""
    T = THRESHOLDS
    checks = [_window(doc, T), _coverage(doc, T), _interval(doc, T)]
    gpus = _used_gpus(doc)
    on_gpus = bool(gpus)
    for gpu in gpus:
        subject = f"GPU {gpu.get('index')}"
        checks += [_energy_agreement(gpu, subject, T), _power_range(doc, gpu, subject, T),
                   _utilisation(doc, gpu, subject, T), _temperature(gpu, subject, T),
                   _throttle(gpu, subject, T)]
    if not on_gpus:
        why = "no GPU was measured (a CPU run)"
        checks += [check(n, "n/a", note=why) for n in
                   ("energy_agreement", "power_range", "gpu_utilisation", "temperature", "throttle")]
    checks += _enforced_limits(doc, T)
    checks.append(_throughput_cv(doc, T))
    checks.append(_slow_epoch(doc, T))
    checks.append(_loss_finite(doc))
    checks += _settle(doc, T)
    worst = max((c["verdict"] for c in checks), key=_RANK.__getitem__, default="pass")
    return {"version": VERSION, "verdict": "pass" if worst == "n/a" else worst,
            "evaluated_by": evaluated_by, "checks": checks,
            "failed": sorted({c["name"] for c in checks if c["verdict"] == "fail"})}


def failed_checks(validity: dict | None) -> list[dict]:
    return [c for c in (validity or {}).get("checks") or [] if c.get("verdict") == "fail"]


def describe(c: dict) -> str:
    """"power_range (GPU 0): 812 W vs <= 735 W" — one failed check in a line."""
    value = c.get("value")
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    unit = f" {c['unit']}" if c.get("unit") and value is not None else ""
    who = f" ({c['subject']})" if c.get("subject") not in (None, "run") else ""
    text = f"{c['name']}{who}: {shown}{unit}"
    if c.get("threshold"):
        text += f", rule {c['threshold']}"
    return text


# ---- the checks -----------------------------------------------------------------
def _used_gpus(doc: dict) -> list[dict]:
    return [g for g in doc.get("gpus") or [] if g.get("used")]


def _grade_low(value: float, fail: float, warn: float) -> str:
    return "fail" if value < fail else "warn" if value < warn else "pass"


def _grade_high(value: float, warn: float, fail: float) -> str:
    return "fail" if value > fail else "warn" if value > warn else "pass"


def _window(doc: dict, T: dict) -> dict:
    power = doc.get("power") or {}
    window = power.get("window_s")
    if window is None:
        window = (doc.get("work") or {}).get("measured_seconds")
    threshold = f">= {T['window_warn_s']:g} s (fail below {T['window_fail_s']:g} s)"
    if not window:
        return check("window_length", "fail" if doc.get("status") == "complete" else "n/a",
                     None, "s", threshold, "no measured window")
    verdict = _grade_low(window, T["window_fail_s"], T["window_warn_s"])
    note = None
    if verdict == "fail" and not power.get("available"):
        # The fail rule is the power sensor's; without power it is a smoke test.
        verdict, note = "warn", "a smoke test (no power measured, so no energy to smear)"
    elif verdict == "fail":
        note = "shorter than NVML's 1 s power average: the energy is mostly the sensor's smear"
    elif verdict == "warn":
        note = ("the power sensor samples only part of each period; a figure to compare "
                "wants >= 30 s (ML.ENERGY) or 60 s (MLPerf)")
    return check("window_length", verdict, window, "s", threshold, note)


def _coverage(doc: dict, T: dict) -> dict:
    quality = (doc.get("power") or {}).get("quality")
    threshold = (f">= {T['coverage_warn_frac']:.0%} of expected "
                 f"(fail below {T['coverage_fail_frac']:.0%})")
    if not quality or not quality.get("power_samples_expected"):
        return check("sample_coverage", "n/a", None, "fraction", threshold,
                     "power was not sampled in a measured window")
    got, expected = quality["power_samples_min"], quality["power_samples_expected"]
    frac = got / expected
    verdict = _grade_low(frac, T["coverage_fail_frac"], T["coverage_warn_frac"])
    return check("sample_coverage", verdict, min(frac, 1.0), "fraction", threshold,
                 f"{got} power samples of {expected} expected (fewest of any source)")


def _interval(doc: dict, T: dict) -> dict:
    protocol = doc.get("protocol") or {}
    asked = protocol.get("sample_interval_s")
    achieved = (protocol.get("sample_interval_achieved_s") or {}).get("median")
    threshold = (f"<= {T['interval_warn_ratio']:g} x requested "
                 f"(fail above {T['interval_fail_s']:g} s)")
    if achieved is None or not asked:
        return check("sample_interval", "n/a", None, "s", threshold, "no samples taken")
    verdict = ("fail" if achieved > T["interval_fail_s"]
               else "warn" if achieved > T["interval_warn_ratio"] * asked else "pass")
    return check("sample_interval", verdict, achieved, "s", threshold,
                 f"median achieved interval; {asked:g} s requested")


def _energy_agreement(gpu: dict, subject: str, T: dict) -> dict:
    energy = gpu.get("energy_j") or {}
    counter, integrated = energy.get("counter"), energy.get("integrated")
    threshold = (f"<= {T['energy_warn_frac']:.0%} apart "
                 f"(fail above {T['energy_fail_frac']:.0%})")
    if counter is None or integrated is None or integrated <= 0:
        have = "counter" if counter is not None else "integrated power" if integrated else "neither"
        return check("energy_agreement", "n/a", None, "fraction", threshold,
                     f"only one energy figure ({have}): nothing to compare", subject)
    frac = abs(counter - integrated) / integrated
    verdict = _grade_high(frac, T["energy_warn_frac"], T["energy_fail_frac"])
    if counter < 0:
        verdict = "fail"
    note = f"counter {counter:.1f} J, integrated samples {integrated:.1f} J"
    if energy.get("note"):
        note += f"; {energy['note']}"
    return check("energy_agreement", verdict, frac, "fraction", threshold, note, subject)


def _idle_baseline_w(doc: dict, index) -> tuple[float | None, str]:
    idle = (doc.get("launcher") or {}).get("idle_baseline") or {}
    for entry in idle.get("devices") or []:
        if entry.get("index") == index and entry.get("mean_power_w") is not None:
            return float(entry["mean_power_w"]), idle.get("source") or "idle baseline"
    return None, ""


def _power_range(doc: dict, gpu: dict, subject: str, T: dict) -> dict:
    power = gpu.get("power_w") or {}
    mean = power.get("mean")
    limits = gpu.get("limits") or {}
    max_w = limits.get("max_w")
    upper = max_w * T["power_max_factor"] if max_w else None
    idle, source = _idle_baseline_w(doc, gpu.get("index"))
    cap = ((doc.get("spec") or {}).get("power") or {}).get("cap_w")
    below_cap = idle is not None and cap is not None and cap < idle
    if below_cap:  # the GPU cannot reach its idle draw: no lower bound to hold it to
        idle = None
    threshold = (f"[{f'{idle:.0f} W idle' if idle is not None else 'idle baseline (none)'}, "
                 f"{f'{upper:.0f} W' if upper is not None else 'max limit (unknown)'} = "
                 f"max limit x {T['power_max_factor']:g}]")
    if mean is None:
        return check("power_range", "n/a", None, "W", threshold, "no power samples", subject)
    notes = []
    verdict = "pass"
    high, what = _power_high(gpu, power)
    if upper is not None and high is not None and high > upper:
        verdict = "fail"
        notes.append(f"{what} {high:.0f} W above the maximum limit {max_w:.0f} W x {T['power_max_factor']:g}")
    if idle is not None and mean < idle:
        verdict = "fail"
        notes.append(f"mean {mean:.0f} W below the idle baseline ({source})")
    if mean <= 0:
        verdict = "fail"
        notes.append("no power drawn")
    if upper is None:
        notes.append("maximum limit unknown (the launcher records it)")
    if below_cap:
        notes.append(f"the cap ({cap:g} W) is below the idle baseline: lower bound not applied")
    elif idle is None:
        notes.append("no idle baseline (a sweep measures one, --idle-s)")
    return check("power_range", verdict, mean, "W", threshold, "; ".join(notes) or None, subject)


def _power_high(gpu: dict, power: dict) -> tuple[float | None, str]:
    """The high end of the power a limit governs: instant readings overshoot a held
    limit for a few hundred ms, so their trailing 1 s mean's p95 (the mean where a
    result predates that figure or its window was shorter than 1 s)."""
    if gpu.get("power_source") != "instant":
        return power.get("p95"), "p95"
    if gpu.get("power_w_1s_p95") is not None:
        return gpu["power_w_1s_p95"], "p95 of the 1 s mean"
    return power.get("mean"), "mean"


def _utilisation(doc: dict, gpu: dict, subject: str, T: dict) -> dict:
    threshold = f">= {T['utilisation_warn_pct']:g} % (fail below {T['utilisation_fail_pct']:g} %)"
    if (doc.get("config") or {}).get("device_type") != "cuda":
        return check("gpu_utilisation", "n/a", None, "%", threshold,
                     "the workload ran on the CPU: the GPU's load says nothing about it", subject)
    util = gpu.get("utilization_pct_mean")
    if util is None:
        return check("gpu_utilisation", "n/a", None, "%", threshold, "utilisation not readable",
                     subject)
    verdict = _grade_low(util, T["utilisation_fail_pct"], T["utilisation_warn_pct"])
    note = "a starved GPU is not a benchmark" if verdict == "fail" else None
    return check("gpu_utilisation", verdict, util, "%", threshold, note, subject)


def _temperature(gpu: dict, subject: str, T: dict) -> dict:
    temp = gpu.get("temperature_c") or {}
    hottest = temp.get("max")
    threshold = f"<= {T['temperature_warn_c']:g} °C (fail above {T['temperature_fail_c']:g} °C)"
    if hottest is None:
        return check("temperature", "n/a", None, "°C", threshold, "temperature not readable", subject)
    verdict = _grade_high(hottest, T["temperature_warn_c"], T["temperature_fail_c"])
    low = temp.get("mean")
    note = f"range up to {hottest:.0f} °C" + (f", mean {low:.0f} °C" if low is not None else "")
    return check("temperature", verdict, hottest, "°C", threshold, note, subject)


def _throttle(gpu: dict, subject: str, T: dict) -> dict:
    reasons = gpu.get("throttle_reasons") or {}
    threshold = (f"thermal/hardware slowdown in <= {T['thermal_throttle_fail_frac']:.0%} "
                 "of readings (any: warn)")
    seen = ", ".join(f"{k} {v:.0%}" for k, v in sorted(reasons.items())) or "none"
    thermal = max((v for k, v in reasons.items() if k in THERMAL_REASONS), default=0.0)
    verdict = _grade_high(thermal, T["thermal_throttle_warn_frac"], T["thermal_throttle_fail_frac"])
    return check("throttle", verdict, thermal, "fraction", threshold, f"reasons seen: {seen}", subject)


def _enforced_limits(doc: dict, T: dict) -> list[dict]:
    """Capped: the limit in force matches the cap at start, at end and in every
    sampled reading between. Uncapped: it is each GPU's default throughout (a
    GPU another run or user capped must not give the uncapped figure)."""
    cap = ((doc.get("spec") or {}).get("power") or {}).get("cap_w")
    if cap is None:
        return _uncapped_limits(doc, T)
    threshold = f"within {T['limit_match_w']:g} W of the requested cap, at start, end and in every reading"
    launcher = doc.get("launcher")
    if not isinstance(launcher, dict):
        return [check("enforced_limit", "n/a", None, "W", threshold,
                      "evaluated by the launcher once the workload has ended")]
    rows = [r for r in launcher.get("gpu_limits") or [] if r.get("requested_w") is not None]
    if not rows:
        return [check("enforced_limit", "fail", None, "W", threshold,
                      "a cap was requested but the launcher recorded no GPU limit")]
    window = _window_limits(doc)
    out = []
    for row in rows:
        asked = float(row["requested_w"])
        seen = [row.get("enforced_at_start_w"), row.get("enforced_at_end_w")]
        low, high = window.get(row["index"], (None, None))
        known = [s for s in (*seen, low, high) if s is not None]
        if not known:
            out.append(check("enforced_limit", "warn", None, "W", threshold,
                             f"requested {asked:g} W; the enforced limit could not be read",
                             f"GPU {row['index']}"))
            continue
        off = max(known, key=lambda s: abs(s - asked))
        verdict = "fail" if abs(off - asked) > T["limit_match_w"] else "pass"
        note = f"requested {asked:g} W; enforced {seen[0]} W at start, {seen[1]} W at end"
        if low is not None:
            note += f", {low:g}-{high:g} W in the window's readings"
        if row.get("changed_during_run_w") is not None:
            note += (f"; someone else set {row['changed_during_run_w']:g} W during the run "
                     "(left in force, not restored)")
        out.append(check("enforced_limit", verdict, off, "W", threshold, note, f"GPU {row['index']}"))
    return out


def _window_limits(doc: dict) -> dict[int, tuple[float | None, float | None]]:
    """Per used GPU: the lowest and highest limit the sampler read in the window."""
    found = {}
    for gpu in doc.get("gpus") or []:
        if gpu.get("used") is False or not isinstance(gpu.get("index"), int):
            continue
        low, high = gpu.get("power_limit_w_min"), gpu.get("power_limit_w_max")
        if low is not None and high is not None:
            found[gpu["index"]] = (float(low), float(high))
    return found


def _uncapped_limits(doc: dict, T: dict) -> list[dict]:
    threshold = f"within {T['limit_match_w']:g} W of each GPU's default limit, at start, end and in every reading"
    launcher = doc.get("launcher")
    rows = (launcher.get("gpu_limits") or []) if isinstance(launcher, dict) else []
    rows = [r for r in rows if r.get("default_w") is not None]
    if not rows:
        return [check("enforced_limit", "n/a", None, "W", threshold,
                      "no cap requested" + ("" if isinstance(launcher, dict) else
                                            "; the limits in force are checked by the launcher"))]
    window = _window_limits(doc)
    out = []
    for row in rows:
        default = float(row["default_w"])
        low, high = window.get(row["index"], (None, None))
        known = [s for s in (row.get("enforced_at_start_w"), row.get("enforced_at_end_w"), low, high)
                 if s is not None]
        if not known:
            continue
        off = max(known, key=lambda s: abs(s - default))
        verdict = "fail" if abs(off - default) > T["limit_match_w"] else "pass"
        note = f"no cap requested; default {default:g} W, limit in force {off:g} W"
        if verdict == "fail":
            note += (f" (held by hpcai run: {row['held_by']})" if row.get("held_by")
                     else " (set outside this run)")
            note += ": this is not an uncapped figure"
        out.append(check("enforced_limit", verdict, off, "W", threshold, note, f"GPU {row['index']}"))
    return out or [check("enforced_limit", "warn", None, "W", threshold,
                         "no cap requested; the limits in force could not be read")]


def _throughput_cv(doc: dict, T: dict) -> dict:
    stats = (doc.get("throughput") or {}).get("stats_node") or {}
    cv, n = stats.get("cv"), stats.get("epochs") or 0
    threshold = f"<= {T['cv_warn']:.0%} (fail above {T['cv_fail']:.0%})"
    if cv is None:
        return check("throughput_cv", "n/a", None, "fraction", threshold,
                     f"{n} measured epoch(s): no spread to compute")
    verdict, note = _grade_high(cv, T["cv_warn"], T["cv_fail"]), f"over {n} measured epochs"
    if verdict == "fail" and n < T["cv_fail_min_epochs"]:
        # Two epochs give a CV with a spread as wide as the value itself: enough to
        # mark the figure noisy (the report does), not to call the run invalid.
        verdict, note = "warn", f"over only {n} measured epochs: too few to fail a run on"
    return check("throughput_cv", verdict, cv, "fraction", threshold, note)


def _loss_finite(doc: dict) -> dict:
    """A training run's loss is a number at the start and the end of its measurement.
    One that turned NaN or infinite (written as null: JSON has neither) trained on
    nothing sound, however fast: seen once in a while in bf16 on CPUs under load."""
    rule = "first and last loss finite"
    if (doc.get("config") or {}).get("task") in ("inference", "command"):
        return check("loss_finite", "n/a", None, None, rule, "no training loss (serving or a command)")
    work = doc.get("work") or {}
    lost = [k for k in ("first_loss", "last_loss")
            if k in work and (work[k] is None
                              or (isinstance(work[k], float) and not math.isfinite(work[k])))]
    if lost:
        return check("loss_finite", "fail", ", ".join(lost), None, rule,
                     "the loss was not a finite number (NaN or infinite)")
    return check("loss_finite", "pass", None, None, rule)


def _slow_epoch(doc: dict, T: dict) -> dict:
    """One epoch far below the others, robustly: against the median of the rest."""
    per_epoch = [float(x) for x in (doc.get("throughput") or {}).get("per_epoch_node") or []
                 if isinstance(x, (int, float))]
    threshold = (f">= {T['slow_epoch_warn_frac']:.0%} of the other epochs' median "
                 f"(fail below {T['slow_epoch_fail_frac']:.0%})")
    if len(per_epoch) < 2:
        return check("slow_epoch", "n/a", None, "fraction", threshold,
                     f"{len(per_epoch)} measured epoch(s): no other epoch to compare with")
    slowest = min(range(len(per_epoch)), key=per_epoch.__getitem__)
    typical = median(per_epoch[:slowest] + per_epoch[slowest + 1:])
    if typical <= 0:
        return check("slow_epoch", "n/a", None, "fraction", threshold,
                     "the other epochs did no work")
    ratio = per_epoch[slowest] / typical
    verdict = _grade_low(ratio, T["slow_epoch_fail_frac"], T["slow_epoch_warn_frac"])
    note = (f"measured epoch {slowest + 1} of {len(per_epoch)}: {per_epoch[slowest]:.4g} vs "
            f"median {typical:.4g} of the others")
    if verdict == "fail" and (doc.get("config") or {}).get("device_type") != "cuda":
        # A CPU run shares its cores with whatever else the host runs: a slow epoch
        # there may be the host's load, and such a run is a smoke test anyway.
        verdict, note = "warn", note + "; a CPU run (the host's load may explain it)"
    return check("slow_epoch", verdict, ratio, "fraction", threshold, note)


def _settle_records(doc: dict) -> list[tuple[str, dict]]:
    """Settle records: `measurement.settle` (a settled or in-run measurement, issue 16:
    drift_at_start, thresholds, settled), else `segment.settle` or `segments[].settle`."""
    segment = doc.get("segment") if isinstance(doc.get("segment"), dict) else None
    subject = f"segment {segment.get('index')}" if segment and segment.get("index") is not None \
        else "segment" if segment else "run"
    measurement = doc.get("measurement")
    if isinstance(measurement, dict) and isinstance(measurement.get("settle"), dict):
        return [(subject, measurement["settle"])]
    found = []
    if segment and isinstance(segment.get("settle"), dict):
        found.append((subject, segment["settle"]))
    for i, seg in enumerate(doc.get("segments") or []):
        if isinstance(seg, dict) and isinstance(seg.get("settle"), dict):
            found.append((f"segment {seg.get('index', i)}", seg["settle"]))
    return found


def _settle(doc: dict, T: dict) -> list[dict]:
    records = _settle_records(doc)
    if not records:
        return [check("settle_drift", "n/a", None, None, None,
                      "not applicable: the result has no in-run segment with a settle record")]
    out = []
    for subject, settle in records:
        drift = next((settle[k] for k in ("drift_at_start", "drift") if isinstance(settle.get(k), dict)),
                     settle)
        given = settle.get("thresholds") if isinstance(settle.get("thresholds"), dict) else {}
        limits = {"temperature_c": float(given.get("temperature_c") or settle.get("settle_temperature_c")
                                         or T["settle_temperature_c"]),
                  "power_frac": float(given.get("power_frac") or settle.get("settle_power_frac")
                                      or T["settle_power_frac"])}
        ratios = {k: adaptive.significant_drift(drift, k) / limits[k] for k in limits
                  if isinstance(drift.get(k), (int, float)) and limits[k] > 0}
        threshold = (f"|temperature slope| <= {limits['temperature_c']:g} °C and |power slope| <= "
                     f"{limits['power_frac']:.0%} beyond {adaptive.SIGNIFICANT_SE:g} standard errors "
                     "of its fit, over the settle window "
                     f"(fail above {T['settle_fail_factor']:g}x)")
        if not ratios:
            no_telemetry = settle.get("stopped") == "no telemetry"
            out.append(check("settle_drift", "n/a" if no_telemetry else "warn", None, None, threshold,
                             "no telemetry: nothing to settle on" if no_telemetry
                             else "the settle record holds no drift figure", subject))
            continue
        worst = max(ratios.values())
        verdict = ("fail" if worst > T["settle_fail_factor"] else "warn" if worst > 1.0 else "pass")
        if settle.get("settled") is False and verdict == "pass":
            verdict = "warn"
        note = ", ".join(f"{k} {drift[k]:+.3g}"
                         + (f" (se {drift[k + '_se']:.2g})" if drift.get(k + "_se") is not None else "")
                         for k in ratios)
        out.append(check("settle_drift", verdict, worst, "x threshold", threshold, note, subject))
    return out
