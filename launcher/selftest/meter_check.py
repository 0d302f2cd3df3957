"""The self-test's meter check: each GPU's energy counter against the node's
meter (the node-scope source the site's [node_power] configures: IPMI, Redfish
or pm_counters), idle and then under the self-test's GPU load (load.py). The
calibration it finds (agreement, the non-GPU offset, date, meter API) is stored
as root's state for hpcai/measure/tier.py, which turns it into the tier every
result carries."""
from __future__ import annotations

import time

from hpcai.errors import HpcaiError
from hpcai.launcher.selftest.base import Check, Context
from hpcai.launcher.selftest.load import GpuLoad

SETTLE_INTERVALS = 1.5  # meter intervals waited around each window


def _counters(devices) -> list[tuple[float, float | None]]:
    """Each GPU's (time, counter J), the time the middle of its read."""
    out = []
    for device in devices:
        before = time.monotonic()
        try:
            energy = device.read_power().energy_j
        except HpcaiError:
            energy = None
        out.append(((before + time.monotonic()) / 2, energy))
    return out


def _phase(node, devices, seconds: float) -> tuple[float, float, list]:
    """(t0, t1) on the node sampler's clock and each GPU's counter energy over it,
    scaled from the span between its own reads to the window (a read held up
    by a busy machine must not shorten or stretch the GPU's share)."""
    t0, first = time.monotonic(), _counters(devices)
    time.sleep(seconds)
    t1, last = time.monotonic(), _counters(devices)
    energies = []
    for (ta, ea), (tb, eb) in zip(first, last):
        energies.append((eb - ea) / (tb - ta) * (t1 - t0) if ea is not None and eb is not None else None)
    return node.wall(t0), node.wall(t1), energies


def _node_meter(summary: dict, window) -> tuple[float | None, str | None]:
    """The node-scope energy over window and the meter's API (node_power.node_section's pick)."""
    from hpcai.measure.node_power import node_section

    section = node_section(summary, None, window[1] - window[0])
    if section["node_energy_j"] is None:
        return None, None
    source, channel = section["node_energy_from"].split("/", 1)
    api = next(e["api"] for e in summary["sources"] if e["source"] == source and e["channel"] == channel)
    return section["node_energy_j"], f"{api} ({section['node_energy_from']})"


def _measure(ctx: Context, node) -> tuple[dict, bool, str | None]:
    """The idle and loaded phases: {name: (window, e0, e1)}, whether the load ran, why not."""
    devices = [device for device, _, _ in ctx.gpus]
    # A meter reading in the same state before each window opens and after it
    # closes: the meter's energy is interpolated between readings, and one taken
    # across the load's start or end would blur idle into loaded.
    wait_s = SETTLE_INTERVALS * max(run.interval_s for run in node.runs)
    node.start()
    try:
        time.sleep(wait_s)
        idle = _phase(node, devices, ctx.durations["idle_s"])
        time.sleep(wait_s)
        with GpuLoad([vid for _, _, vid in ctx.gpus], ctx.vendor, ctx.load) as load:
            time.sleep(wait_s)
            loaded = _phase(node, devices, ctx.durations["load_s"])
            time.sleep(wait_s)
            active, why = load.active, load.why
    finally:
        node.stop()
    return {"idle": idle, "loaded": loaded}, active, why


def check_meter(ctx: Context) -> list[Check]:
    from hpcai.measure.node_power import NodePowerSampler

    config = ctx.site.get("node_power") or {}
    if not ctx.gpus:
        return [Check("meter", "meter", "skipped", "no GPU")]
    if not config.get("sources"):
        return [Check("meter", "meter", "skipped", "the site configures no node meter ([node_power] "
                      "sources): results stay tier counter")]
    node = NodePowerSampler(config)
    if not node.runs:
        node.stop()
        why = "; ".join(f"{s['source']}: {s['detail']}" for s in node.status)
        return [Check("meter", "meter", "FAIL", f"no node source answers: {why}", {"status": node.status})]
    phases, loaded, why = _measure(ctx, node)
    summary = node.summary(None)
    return _rows(ctx, node, phases, loaded, why, summary)


def _rows(ctx: Context, node, phases: dict, loaded: bool, why: str | None, summary: dict) -> list[Check]:
    from hpcai.measure.tier import Phase

    rows, measured = [], {}
    for name, (t0, t1, gpu_j) in phases.items():
        node_j, api = _node_meter(node.summary((t0, t1)), (t0, t1))
        measured[name] = (gpu_j, node_j, api, t1 - t0)
    for i, (_, info, _) in enumerate(ctx.gpus):
        watts = {n: (m[0][i] / m[3] if m[0][i] is not None else None) for n, m in measured.items()}
        ok = all(w is not None for w in watts.values())
        value = (f"counter idle {watts['idle']:.0f} W, loaded {watts['loaded']:.0f} W" if ok
                 else "the energy counter could not be read")
        rows.append(Check("meter", f"GPU {info.index} counter", "ok" if ok else "FAIL", value, watts))
    (idle_j, idle_node, api, idle_s), (load_j, load_node, _, load_s) = measured["idle"], measured["loaded"]
    if None in idle_j or None in load_j or idle_node is None or load_node is None:
        reasons = summary["reasons"] or ["the node meter measured no window"]
        return rows + [Check("meter", "node meter", "FAIL", "; ".join(reasons), {"reasons": reasons})]
    idle, load = Phase(idle_j, idle_node, idle_s), Phase(load_j, load_node, load_s)
    return rows + _calibration_rows(ctx, idle, load, api, loaded, why)


def _calibration_rows(ctx: Context, idle, load, api: str, loaded: bool, why: str | None) -> list[Check]:
    from hpcai.launcher.site.tier import store_calibration
    from hpcai.measure.tier import DEFAULT_AGREEMENT_FRAC, calibrate, tier_of

    calibration = calibrate(idle, load, api)
    found = calibration["agreement_within_frac"]
    stated = float(ctx.site["node_power"].get("agreement_frac", DEFAULT_AGREEMENT_FRAC))
    value = (f"node {idle.node_w:.0f} W idle, {load.node_w:.0f} W loaded; GPU counters {idle.gpu_w:.0f} W, "
             f"{load.gpu_w:.0f} W; non-GPU offset {calibration['offset_w']:.0f} W; {api}")
    if not loaded:
        return [Check("meter", "node meter", "warn", f"{value}; no load ({why}): nothing to compare, "
                      "no calibration stored", calibration)]
    if found is None:
        return [Check("meter", "node meter", "FAIL", f"{value}; the load did not show at the meter",
                      calibration)]
    status = "ok" if found <= stated else "warn"
    rows = [Check("meter", "node meter", status, f"{value}; agree within {found:.1%} (stated {stated:.1%})",
                  calibration)]
    try:
        path = store_calibration(ctx.site, calibration)
    except (HpcaiError, OSError) as exc:
        message = exc.one_line() if isinstance(exc, HpcaiError) else f"{type(exc).__name__}: {exc}"
        return rows + [Check("meter", "calibration", "warn", f"not stored: {message}")]
    tier = tier_of(ctx.site["node_power"], calibration, None)
    value = f"stored at {path}: tier {tier['tier']}" + (f" ({tier['reason']})" if tier["reason"] else "")
    return rows + [Check("meter", "calibration", "ok", value, {"path": str(path), "tier": tier})]
