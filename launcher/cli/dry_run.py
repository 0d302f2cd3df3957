"""What `--dry-run` prints: the plan in words (the runs, their caps and order, and
the wall time the protocol allows); the JSON behind it only with `--json`."""
from __future__ import annotations

import json
import shlex

JSON_HINT = "(add --json for this plan as JSON)"


def cap_text(cap_w: float | None) -> str:
    return "uncapped" if cap_w is None else f"{cap_w:g} W"


def duration(seconds: float) -> str:
    """"45 s", "12 min", "2 h 05 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def measured_bounds(protocol) -> tuple[float, float] | None:
    """Seconds one cap's measurement takes by the protocol's time-bound window (an
    adaptive window, every sweep's): at least min_window_s; at most settling
    (settle_max_s) plus max_window_s. None: the fixed protocol, epochs of steps,
    whose time is the throughput's, unknown before the run."""
    if protocol.get("ci_target") is None and protocol.get("max_window_s") is None:
        return None
    return (float(protocol.get("min_window_s")),
            float(protocol.get("settle_max_s") or 0.0) + float(protocol.get("max_window_s")))


def wall_time(protocol, runs: int, idle_s: float) -> str:
    """The estimate's line: the measured time of `runs` caps and the idle between them."""
    bounds = measured_bounds(protocol)
    if bounds is None:
        return (f"not estimated: the fixed protocol ({protocol.get('warmup_epochs')} warm-up and "
                f"{protocol.get('epochs')} measured epochs of {protocol.get('steps_per_epoch')} "
                "steps) takes as long as the throughput makes it")
    idle = idle_s if runs else 0.0  # the idle baseline, once before the first run
    low, high = bounds[0] * runs + idle, bounds[1] * runs + idle
    return (f"{duration(low)} to {duration(high)} plus start-up and warm-up ({runs} × a "
            f"{bounds[0]:g}-{bounds[1]:g} s window with settling, and {idle_s:g} s idle baseline)")


def print_run(spec, command: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps(spec.to_json(), indent=2))
        print("command: " + shlex.join(command))
        return
    devices, protocol = spec.devices, spec.protocol
    print(f"run {spec.run_id}: {spec.workload}, preset {spec.preset}, on {devices.nproc} "
          f"{'GPU(s)' if devices.type == 'cuda' else 'CPU process(es)'}, "
          f"{cap_text(spec.power.cap_w)}")
    print(f"  protocol: {protocol.get('warmup_epochs')} warm-up + {protocol.get('epochs')} "
          f"measured epochs of {protocol.get('steps_per_epoch')} steps")
    print(f"  estimated wall time: {wall_time(protocol, 1, 0.0)}")
    print(f"  results in {spec.output_dir}")
    print("  command: " + shlex.join(command))
    print(JSON_HINT)


def print_sweep(plan: dict, protocol, idle_s: float, first_command: list[str], as_json: bool) -> None:
    """plan: the sweep's JSON plan (sweep_id, folder, seed, order, in_run, runs)."""
    if as_json:
        print(json.dumps(plan, indent=2))
        print("command of the first run: " + " ".join(first_command))
        return
    runs = plan["runs"]
    todo = [r for r in runs if r["status"] == "to run"]
    caps = list(dict.fromkeys(cap_text(r["cap_w"]) for r in runs))
    how = "one process for every cap (in-run)" if plan["in_run"] else "one process per run"
    print(f"sweep {plan['sweep_id']}: {len(runs)} run(s), {len(todo)} to run; caps {', '.join(caps)}; "
          f"order {plan['order']} (seed {plan['seed']}); {how}")
    for i, r in enumerate(runs, 1):
        extra = "".join(f", {k} {v}" for k, v in (r.get("point") or {}).items())
        clocks = "".join(f", {k.split('_')[0].upper()} clock {r[k]} MHz" for k in ("sm_clock_mhz", "mem_clock_mhz")
                         if k in r)
        print(f"  {i:>3}. {cap_text(r['cap_w'])}{clocks}{extra}, repeat {r['repeat']}: {r['status']}")
    print(f"  estimated wall time: {wall_time(protocol, len(todo), idle_s)}")
    print(f"  folder: {plan['folder']}")
    print("  command of the first run: " + " ".join(first_command))
    print(JSON_HINT)
