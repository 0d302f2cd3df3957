"""The self-test's checks of the GPU management library, the GPUs, their
power readings, caps and the sampler. Each returns rows (Check) with the
value it measured; none leaves a limit changed."""
from __future__ import annotations

import statistics
import time

from hpcai.errors import HpcaiError
from hpcai.gpu.base import LIMIT_MATCH_W
from hpcai.launcher.selftest.base import Check, Context
from hpcai.launcher.selftest.load import GpuLoad
from hpcai.measure.stats import median

ENERGY_AGREEMENT_FRAC = 0.05  # counter vs integrated power over the load window
CAP_TOLERANCE_FRAC = 0.05  # median power may exceed the cap by this much
NEAR_CAP_FRAC = 0.8  # under load, power should reach this share of the cap
POLL_S = 0.01  # sensor update period: how often it is polled


def _w(value) -> str:
    return "?" if value is None else f"{value:.0f} W"


# ---- library and GPUs ------------------------------------------------------------
def check_library(ctx: Context) -> list[Check]:
    if ctx.library is None:
        why = "; ".join(ctx.no_gpu_reasons)
        return [Check("library", "GPU library", "skipped",
                      "no GPU management library sees a GPU" + (f" ({why})" if why else ""),
                      {"reasons": ctx.no_gpu_reasons})]
    versions = ctx.library.versions()
    value = f"{ctx.library.vendor}: " + ", ".join(f"{k} {v}" for k, v in versions.items())
    # An amdsmi other than the ROCm copy on this node may not match its libamd_smi.so.
    status = "warn" if "not ROCm's own" in versions.get("amdsmi_python", "") else "ok"
    return [Check("library", "GPU library", status, value, {"versions": versions})]


def check_gpus(ctx: Context) -> list[Check]:
    if ctx.library is None:
        return [Check("gpus", "GPUs", "skipped", "no GPU")]
    rows = []
    visible = {info.uuid for _, info, _ in ctx.gpus}
    for device in ctx.library.devices():
        info = device.info()
        seen = info.uuid in visible
        mig = f"MIG on ({len(info.mig_uuids)} instances)" if info.mig_enabled else "MIG off"
        value = (f"{info.name}, {info.uuid}, PCI {info.pci_bus_id or '?'}, "
                 f"{'visible to this job' if seen else 'not visible to this job'}, {mig}")
        status = "warn" if info.mig_enabled else "ok"
        detail = info.to_dict()
        if info.mig_enabled:
            detail["note"] = "power and energy are the whole GPU's; caps are refused"
        rows.append(Check("gpus", f"GPU {info.index}", status, value, detail))
    for skipped in getattr(ctx.library, "inaccessible", []):
        rows.append(Check("gpus", f"GPU {skipped['index']}", "warn",
                          f"not accessible to this process: {skipped['reason']}", skipped))
    if not ctx.gpus:
        rows.append(Check("gpus", "visibility", "FAIL",
                          "the library sees GPUs, but none is visible to this job "
                          "(CUDA_/ROCR_VISIBLE_DEVICES)"))
    return rows


# ---- power readings --------------------------------------------------------------
def _update_period(device, seconds: float) -> tuple[float | None, float | None]:
    """Median time between changes of the power reading and of the energy counter."""
    power_changes, energy_changes = [], []
    last_p = last_e = None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            reading = device.read_power()
        except HpcaiError:
            reading = None
        t = time.monotonic()
        if reading is not None:
            if reading.power_w is not None and reading.power_w != last_p:
                power_changes.append(t)
                last_p = reading.power_w
            if reading.energy_j is not None and reading.energy_j != last_e:
                energy_changes.append(t)
                last_e = reading.energy_j
        time.sleep(POLL_S)

    def median_gap(times):
        gaps = [b - a for a, b in zip(times[1:], times[2:])]  # the first change is the start
        return median(gaps) if gaps else None

    return median_gap(power_changes), median_gap(energy_changes)


def _limits(device):
    try:
        return device.power_limits()
    except HpcaiError:
        return None


def _sample(devices: list, seconds: float, interval_s: float = 0.1):
    from hpcai.measure.telemetry import Sampler

    sampler = Sampler(devices, interval_s)
    start, end = sampler.sample_for(seconds, "check")
    return sampler, start, end


def check_power(ctx: Context) -> list[Check]:
    from hpcai.workloads.result import counter_problem
    from hpcai.measure.telemetry import integrate_power_j

    if not ctx.gpus:
        return [Check("power", "power", "skipped", "no GPU")]
    rows = []
    devices = [device for device, _, _ in ctx.gpus]
    for device, info, _ in ctx.gpus:
        fields = device.power_fields()
        have = [k for k, v in fields.items() if v is not None]
        status = "ok" if len(have) == 2 else "warn" if have else "FAIL"
        value = ", ".join(f"{k} {_w(v)}" if v is not None else f"{k} unavailable" for k, v in fields.items())
        rows.append(Check("power", f"GPU {info.index} fields", status, value, fields))
        period_p, period_e = _update_period(device, ctx.durations["period_s"])
        status = "ok" if period_p is not None else "warn"
        value = (f"power every {period_p * 1000:.0f} ms" if period_p is not None
                 else "power did not change while polled: period not measured")
        value += (f", energy counter every {period_e * 1000:.0f} ms" if period_e is not None
                  else ", energy counter period not measured")
        rows.append(Check("power", f"GPU {info.index} update period", status, value,
                          {"power_period_s": period_p, "energy_period_s": period_e}))
    # Idle: nothing of ours runs.
    sampler, start, end = _sample(devices, ctx.durations["idle_s"])
    for i, (device, info, _) in enumerate(ctx.gpus):
        powers = [r.power_w for _, r in sampler.series(i, start.t, end.t) if r.power_w is not None]
        idle = statistics.fmean(powers) if powers else None
        limits = _limits(device)
        top = (limits.max_w or limits.default_w) if limits else None
        ok = idle is not None and idle > 0 and (top is None or idle <= top)
        rows.append(Check("power", f"GPU {info.index} idle", "ok" if ok else "FAIL",
                          f"{_w(idle)} (range 0-{_w(top)})", {"idle_w": idle, "max_w": top}))
    # Under load: the energy counter against integrated power.
    with GpuLoad([vid for _, _, vid in ctx.gpus], ctx.vendor, ctx.load) as load:
        sampler, start, end = _sample(devices, ctx.durations["load_s"])
        loaded, why = load.active, load.why  # the block's exit ends the load
    condition = "under load" if loaded else f"idle ({why})"
    for i, (_, info, _) in enumerate(ctx.gpus):
        series = sampler.series(i, start.t, end.t)
        e0, e1 = start.energy_j[i], end.energy_j[i]
        counter = e1 - e0 if e0 is not None and e1 is not None else None
        trapz = integrate_power_j(series)
        span = series[-1][0] - series[0][0] if len(series) > 1 else 0
        integrated = trapz / span * (end.t - start.t) if trapz is not None and span > 0 else None
        problem = counter_problem(sampler, i, start.t, end.t, counter)
        detail = {"counter_j": counter, "integrated_j": integrated, "window_s": end.t - start.t,
                  "loaded": loaded, "problem": problem}
        if counter is None or integrated is None:
            rows.append(Check("power", f"GPU {info.index} energy", "FAIL",
                              f"counter {counter}, integrated {integrated}: cannot compare", detail))
            continue
        diff = abs(counter - integrated) / max(integrated, 1e-9)
        detail["difference_frac"] = diff
        status = "FAIL" if problem or diff > ENERGY_AGREEMENT_FRAC else "ok"
        value = (f"counter {counter:.0f} J vs integrated {integrated:.0f} J ({diff:.1%}) over "
                 f"{end.t - start.t:.0f} s, {condition}" + (f"; counter {problem}" if problem else ""))
        rows.append(Check("power", f"GPU {info.index} energy", status, value, detail))
    return rows


# ---- caps ----------------------------------------------------------------------------
def cap_steps(limits: list) -> list[tuple[str, float]]:
    """Minimum, a middle value and the default, valid on every GPU."""
    lo = max(lim.min_w for lim in limits)
    hi = min(lim.max_w for lim in limits)
    default = min(lim.default_w or hi for lim in limits)
    return [("minimum", lo), ("middle", round((lo + default) / 2)), ("default", default)]


def check_caps(ctx: Context) -> list[Check]:
    from hpcai.launcher.power import CapSession

    if not ctx.gpus:
        return [Check("caps", "caps", "skipped", "no GPU")]
    backend = ctx.backend
    may, why = backend.can_set()
    if not may:
        return [Check("caps", "caps", "skipped", f"caps not permitted here: {why}")]
    gpus = [(d, info) for d, info, _ in ctx.gpus if not info.mig_enabled]
    if not gpus:
        return [Check("caps", "caps", "skipped", "every GPU of this job is in MIG mode")]
    indices = [info.index for _, info in gpus]
    snapshot = {i: backend.limits(i) for i in indices}
    if any(lim.min_w is None or lim.max_w is None for lim in snapshot.values()):
        return [Check("caps", "caps", "skipped", "the GPUs report no min/max power limit")]
    rows = []
    loaded_ids = [vid for _, info, vid in ctx.gpus if info.index in indices]
    with GpuLoad(loaded_ids, ctx.vendor, ctx.load) as load:
        for label, cap in cap_steps(list(snapshot.values())):
            try:
                with CapSession(backend, cap, indices, ctx.journal) as session:
                    sampler, start, end = _sample([d for d, _ in gpus], ctx.durations["cap_s"])
                    enforced = {i: g["enforced_w"] for i, g in session.gpus.items()}
            except HpcaiError as exc:
                rows.append(Check("caps", f"{label} {cap:g} W", "FAIL", exc.one_line()))
                continue
            medians = []
            for i in range(len(gpus)):
                powers = [r.power_w for _, r in sampler.series(i, start.t, end.t) if r.power_w is not None]
                medians.append(median(powers) if powers else None)
            over = [m for m in medians if m is not None and m > cap * (1 + CAP_TOLERANCE_FRAC)]
            under = load.active and any(m is not None and m < NEAR_CAP_FRAC * cap for m in medians)
            status = "FAIL" if over else "warn" if under else "ok"
            value = (f"enforced {', '.join(_w(e) for e in enforced.values())}; median power "
                     f"{', '.join(_w(m) for m in medians)}"
                     + ("" if load.active else f" (no load: {load.why}; nearness to the cap not checked)"))
            rows.append(Check("caps", f"{label} {cap:g} W", status, value,
                              {"cap_w": cap, "enforced_w": enforced, "median_power_w": medians,
                               "loaded": load.active}))
    back = {i: backend.limits(i).current_w for i in indices}
    wrong = [i for i in indices if abs(back[i] - snapshot[i].current_w) > LIMIT_MATCH_W]
    journal_left = ctx.journal.exists()
    status = "FAIL" if wrong or journal_left else "ok"
    value = ("limits back at " + ", ".join(_w(w) for w in back.values())
             + ("; journal left behind" if journal_left else "; journal removed"))
    rows.append(Check("caps", "restore", status, value, {"limits_w": back}))
    return rows


# ---- the sampler's own cost ----------------------------------------------------------------
def _per_call_s(fn, n: int) -> float | None:
    start = time.perf_counter()
    for _ in range(n):
        try:
            fn()
        except HpcaiError:
            return None
    return (time.perf_counter() - start) / n


def check_sampler(ctx: Context) -> list[Check]:
    from hpcai.measure.telemetry import FULL_READ_S

    sources = [d for d, _, _ in ctx.gpus] or ctx.rapl
    if not sources:
        return [Check("sampler", "sampler", "skipped", "nothing to sample (no GPU, no RAPL)")]
    interval = 0.1
    sampler, _, _ = _sample(sources, ctx.durations["sampler_s"], interval)
    overhead = sampler.overhead() or {}
    share = overhead.get("cpu_share_of_core")
    power_times = [t for s in sources if (t := _per_call_s(getattr(s, "read_power", s.read), 20)) is not None]
    full_times = [t for s in sources if (t := _per_call_s(s.read, 5)) is not None]
    if not power_times or not full_times:
        return [Check("sampler", "cost", "FAIL", "the sources could not be read")]
    power_s, full_s = statistics.fmean(power_times), statistics.fmean(full_times)
    # 8 GPUs at 100 ms: power every tick, the rest once a second.
    estimate = 8 * (power_s / interval + full_s / FULL_READ_S)
    status = "ok" if share is not None and share < 0.01 and estimate < 0.01 else "warn"
    value = (f"{share:.2%} of a core for {len(sources)} source(s)" if share is not None else "share unknown")
    value += (f"; per source: power read {power_s * 1e6:.0f} µs, full read {full_s * 1e6:.0f} µs; "
              f"8 GPUs at 100 ms: about {estimate:.2%} of a core")
    return [Check("sampler", "cost", status, value,
                  {"cpu_share_of_core": share, "mean_tick_s": overhead.get("mean_tick_s"),
                   "power_read_s": power_s, "full_read_s": full_s,
                   "estimate_8_gpus_share_of_core": estimate})]
