"""Node power beyond the GPU board: RAPL (CPU packages, DRAM), HPE Cray
pm_counters (node, accelerators, CPU, memory) and the BMC (IPMI DCMI,
Redfish). Each is a PowerSource (source.py) in its own module, opened here by
kind (OPENERS); none of them imports this module.

Each source runs in its own thread at its own natural rate (a BMC updates
about once a second), so a slow or hung source never stalls the GPU sampler
or the measured window. Every channel names its scope (node, cpu_package,
dram, accelerator, module), its boundary and the API that produced it.
Faults (no answer, slow answer, 0 or absurd power, a counter that runs
backwards, stale data) become per-source reasons; the run goes on.

Pure Python: the launcher imports this for `site check`.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.measure.efficiency import energy_with_overhead_j
from hpcai.measure.ipmi import IpmiDcmiSource
from hpcai.measure.pm_counters import PmCountersSource
from hpcai.measure.rapl import POWERCAP_ROOT, RaplSource
from hpcai.measure.redfish import RedfishSource
from hpcai.measure.source import BOUNDARY, DEFAULT_MAX_POWER_W, PowerSource, SourceError
from hpcai.measure.stats import median

# kind -> how to open it from its site section and the per-channel power limit.
OPENERS = {
    "rapl": lambda section, max_w: RaplSource(Path(section.get("root", POWERCAP_ROOT)), max_w),
    "pm_counters": lambda section, max_w: PmCountersSource(
        Path(section.get("root", "/sys/cray/pm_counters")), max_w),
    "ipmi": IpmiDcmiSource,
    "redfish": RedfishSource,
}
KINDS = tuple(OPENERS)
BMC_KINDS = ("ipmi", "redfish")
DEFAULT_INTERVAL_S = {"rapl": 1.0, "pm_counters": 1.0, "ipmi": 1.0, "redfish": 1.0}
MIN_INTERVAL_S = {"rapl": 0.1, "pm_counters": 0.1, "ipmi": 1.0, "redfish": 1.0}  # never poll a BMC faster
SLOW_FACTOR = 2.0  # a read taking longer than this many intervals is "slow"


# ---- the per-source thread ---------------------------------------------------------

@dataclass
class SourceRun:
    """One source sampled in its own thread; the samples and what went wrong."""
    source: PowerSource
    interval_s: float
    samples: list = field(default_factory=list)
    faults: dict = field(default_factory=dict)  # reason -> count
    read_cost_s: list = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu = None

    def fault(self, reason: str) -> None:
        self.faults[reason] = self.faults.get(reason, 0) + 1

    def tick(self) -> None:
        start = time.monotonic()
        try:
            sample = self.source.read()
        except SourceError as exc:
            self.fault(str(exc))
            return
        except Exception as exc:  # a failed read is a gap, not a failed run
            self.fault(f"no answer ({type(exc).__name__}: {exc})")
            return
        took = time.monotonic() - start
        self.read_cost_s.append(took)
        if took > SLOW_FACTOR * self.interval_s:
            self.fault(f"slow answer (a read took more than {SLOW_FACTOR * self.interval_s:g} s)")
        limit = self.source.max_power_w
        for name, watts in list(sample.power_w.items()):
            if watts is None:
                continue
            if watts <= 0:
                self.fault(f"{name}: power of 0 W rejected")
                sample.power_w[name] = None
            elif watts > limit:
                self.fault(f"{name}: absurd power {watts:g} W rejected (above {limit:g} W)")
                sample.power_w[name] = None
        if self.samples:
            prev = self.samples[-1]
            for name, e in sample.energy_j.items():
                before = prev.energy_j.get(name)
                if e is not None and before is not None and e < before:
                    self.fault(f"{name}: energy counter went backwards")
        for name in sorted(self.source.take_backwards()):
            self.fault(f"{name}: energy counter went backwards")
        self.samples.append(sample)

    def _loop(self) -> None:
        cpu0 = time.thread_time()
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.tick()
            deadline += self.interval_s
            delay = deadline - time.monotonic()
            if delay < 0:
                deadline, delay = time.monotonic(), 0
            self._stop.wait(delay)
        self._cpu = time.thread_time() - cpu0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"hpcai-node-{self.source.kind}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """A hung read is left behind (daemon thread) rather than waited for."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive():
                self.fault("still reading when the run ended (hung source left behind)")
                return
            if self.source.kind not in BMC_KINDS:  # a last counter read, so the samples cover
                self.tick()  # the window's end (a BMC's is bounded, but slow: not it)
        self.source.close()


# ---- configuration -----------------------------------------------------------------

def open_sources(config: dict | None) -> tuple[list[SourceRun], list[dict]]:
    """The site's [node_power] section -> running-ready sources, and one
    entry {source, status, detail} per source asked for (for `site check`
    and the result). `auto` tries each kind and keeps what answers."""
    config = config or {}
    wanted = list(config.get("sources", []))
    auto = wanted == ["auto"]
    configured = {"ipmi": config.get("ipmi", {}).get("host"), "redfish": config.get("redfish", {}).get("url")}
    kinds = [k for k in KINDS if k not in BMC_KINDS or configured[k]] if auto else wanted
    runs, status = [], []
    max_w = float(config.get("max_power_w", DEFAULT_MAX_POWER_W))
    for kind in kinds:
        try:
            source = _open(kind, config, max_w)
        except SourceError as exc:
            status.append({"source": kind, "status": "absent" if auto else "unavailable",
                           "detail": str(exc)})
            continue
        interval = max(float(config.get(kind, {}).get("interval_s", DEFAULT_INTERVAL_S[kind])),
                       MIN_INTERVAL_S[kind])
        runs.append(SourceRun(source, interval))
        chans = ", ".join(f"{c.name} ({c.scope})" for c in source.channels)
        status.append({"source": kind, "status": "ok", "detail": f"{chans}; every {interval:g} s"})
    return runs, status


def _open(kind: str, config: dict, max_w: float) -> PowerSource:
    opener = OPENERS.get(kind)
    if opener is None:
        raise SourceError(f"unknown node power source {kind!r}")
    return opener(config.get(kind, {}), max_w)


class NodePowerSampler:
    """All node sources, each in its own thread."""

    def __init__(self, config: dict | None):
        self.config = config or {}
        self.runs, self.status = open_sources(self.config)
        # Monotonic -> the GPU sampler's wall-anchored clock, fixed once.
        self._wall0, self._mono0 = time.time(), time.monotonic()

    def start(self) -> None:
        for run in self.runs:
            run.start()

    def stop(self) -> None:
        for run in self.runs:
            run.stop()

    def wall(self, t_mono: float) -> float:
        return self._wall0 + (t_mono - self._mono0)

    def summary(self, window: tuple[float, float] | None) -> dict:
        """Per source and channel over window (wall-clock seconds, as the GPU
        sampler's): energy, mean power, scope, boundary, API, achieved interval."""
        entries, reasons = [], []
        for st in self.status:
            if st["status"] == "unavailable":
                reasons.append(f"{st['source']}: {st['detail']}")
        for run in self.runs:
            src = run.source
            for reason, count in run.faults.items():
                reasons.append(f"{src.kind}: {reason} ({count}x)")
            times = [self.wall(s.t) for s in run.samples]
            gaps = [b - a for a, b in zip(times, times[1:])]
            for ch in src.channels:
                entry = {"source": src.kind, "api": src.api, "channel": ch.name,
                         "scope": ch.scope, "boundary": BOUNDARY[ch.scope],
                         "interval_s": run.interval_s,
                         "achieved_interval_s": median(gaps) if gaps else None,
                         "samples": 0, "energy_j": None, "energy_basis": None,
                         "mean_power_w": None}
                if window is not None:
                    entry.update(_channel_window(run, ch.name, times, window))
                entries.append(entry)
        return {"sources": entries, "reasons": reasons,
                "cpu_s": sum(r._cpu or 0.0 for r in self.runs)}


def _channel_window(run: SourceRun, name: str, times: list, window) -> dict:
    t0, t1 = window
    span = t1 - t0
    counter_ok = not any(r.startswith(f"{name}: energy counter went backwards") for r in run.faults)
    energy_pts = [(t, s.energy_j.get(name)) for t, s in zip(times, run.samples)
                  if s.energy_j.get(name) is not None]
    power_pts = [(t, s.power_w.get(name)) for t, s in zip(times, run.samples)
                 if s.power_w.get(name) is not None]
    inside = sum(1 for t, _ in power_pts if t0 <= t <= t1)
    energy, basis = None, None
    if counter_ok and len(energy_pts) >= 2 and energy_pts[0][0] <= t0 and energy_pts[-1][0] >= t1:
        energy, basis = _interp(energy_pts, t1) - _interp(energy_pts, t0), "energy counter"
    elif len(power_pts) >= 2 and power_pts[0][0] <= t0 + run.interval_s \
            and power_pts[-1][0] >= t1 - run.interval_s:
        pts = [(t, p) for t, p in power_pts if t0 - run.interval_s <= t <= t1 + run.interval_s]
        if len(pts) >= 2:
            mean_p = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:])) \
                / (pts[-1][0] - pts[0][0])
            energy, basis = mean_p * span, "integrated power"
    return {"samples": inside, "energy_j": energy, "energy_basis": basis,
            "mean_power_w": energy / span if energy is not None and span > 0 else None}


def _interp(points, t):
    if t <= points[0][0]:
        return points[0][1]
    for (ta, ea), (tb, eb) in zip(points, points[1:]):
        if ta <= t <= tb:
            return ea if tb == ta else ea + (eb - ea) * (t - ta) / (tb - ta)
    return points[-1][1]


def node_section(summary: dict | None, gpu_energy_j: float | None, window_s: float | None,
                 status: list | None = None) -> dict | None:
    """The result's node_power: the sources, and the node's measured overhead
    (node minus GPUs) where a node-scope channel measured the window."""
    if summary is None:
        return None
    node = next((e for e in summary["sources"] if e["scope"] == "node"
                 and e["energy_j"] is not None), None)
    overhead = None
    if node is not None and gpu_energy_j is not None:
        overhead = node["energy_j"] - gpu_energy_j
    return {
        "sources": summary["sources"],
        "reasons": summary["reasons"],
        "status": status or [],
        "node_energy_j": node["energy_j"] if node else None,
        "node_energy_from": f"{node['source']}/{node['channel']}" if node else None,
        "measured_overhead_j": overhead,
        "measured_overhead_w": overhead / window_s if overhead is not None and window_s else None,
    }


def energy_with_node(node_power: dict | None, gpu_energy_j: float | None,
                     overhead_w: float, window_s: float | None) -> tuple[float | None, str]:
    """The one place that picks the node energy for efficiency "with node":
    measured node energy when a node-scope source measured the window, else
    the GPUs' energy plus the site's fixed overhead. Returns (J, basis)."""
    if node_power and node_power.get("node_energy_j") is not None:
        return node_power["node_energy_j"], f"measured ({node_power['node_energy_from']})"
    return (energy_with_overhead_j(gpu_energy_j, overhead_w, window_s),
            f"fixed overhead ({overhead_w:g} W per node)")
