"""Node power beyond the GPU board: RAPL (CPU packages, DRAM), HPE Cray
pm_counters (node, accelerators, CPU, memory) and the BMC (IPMI DCMI).

Each source runs in its own thread at its own natural rate (a BMC updates
about once a second), so a slow or hung source never stalls the GPU sampler
or the measured window. Every channel names its scope (node, cpu_package,
dram, accelerator, module), its boundary and the API that produced it.
Faults (no answer, slow answer, 0 or absurd power, a counter that runs
backwards, stale data) become per-source reasons; the run goes on.

Pure Python: the launcher imports this for `site check`.
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SCOPES = ("node", "cpu_package", "dram", "accelerator", "module")
BOUNDARY = {"node": "node", "cpu_package": "CPU package", "dram": "DRAM",
            "accelerator": "accelerator (GPU module)", "module": "module"}
KINDS = ("rapl", "pm_counters", "ipmi", "redfish")
BMC_KINDS = ("ipmi", "redfish")
DEFAULT_INTERVAL_S = {"rapl": 1.0, "pm_counters": 1.0, "ipmi": 1.0, "redfish": 1.0}
MIN_INTERVAL_S = {"rapl": 0.1, "pm_counters": 0.1, "ipmi": 1.0, "redfish": 1.0}  # never poll a BMC faster
DEFAULT_MAX_POWER_W = 20000.0  # above this, per channel, a reading is absurd
SLOW_FACTOR = 2.0  # a read taking longer than this many intervals is "slow"


class SourceError(Exception):
    """A source could not be read; the message is the reason (no secrets)."""


@dataclass
class Channel:
    name: str  # e.g. "package-0", "dram-0", "node", "accel0"
    scope: str


@dataclass
class Sample:
    t: float
    power_w: dict  # channel -> W or None
    energy_j: dict  # channel -> cumulative J (since the source started) or None


# ---- RAPL ---------------------------------------------------------------------

class RaplSource:
    """CPU packages and their DRAM domains from Linux powercap (intel-rapl).

    energy_uj counts up and wraps at max_energy_range_uj (kernel
    Documentation/power/powercap/powercap.rst); a drop is a wrap only when the
    unwrapped change is a plausible energy, otherwise the counter ran backwards.
    """
    kind = "rapl"
    api = "Linux powercap sysfs (intel-rapl energy_uj)"

    def __init__(self, root: Path = Path("/sys/class/powercap"),
                 max_power_w: float = DEFAULT_MAX_POWER_W):
        self.root = Path(root)
        self.max_power_w = max_power_w
        self.zones: dict[str, tuple[Path, int]] = {}
        if not self.root.is_dir():
            raise SourceError(f"{self.root} does not exist (no Linux powercap driver)")
        unreadable = []
        for path in sorted(self.root.glob("intel-rapl:*")):
            try:
                name = (path / "name").read_text().strip()
                rng = int((path / "max_energy_range_uj").read_text())
                int((path / "energy_uj").read_text())
            except PermissionError:
                unreadable.append(path.name)
                continue
            except (OSError, ValueError):
                continue
            parts = path.name.split(":")
            if len(parts) == 2 and name.startswith("package"):
                self.zones[f"package-{parts[1]}"] = (path, rng)
            elif len(parts) == 3 and name == "dram":
                self.zones[f"dram-{parts[1]}"] = (path, rng)
        if not self.zones:
            if unreadable:
                raise SourceError(f"RAPL counters {', '.join(unreadable)} are readable only by root")
            raise SourceError(f"no RAPL package or DRAM domains under {self.root}")
        self.channels = [Channel(n, "dram" if n.startswith("dram") else "cpu_package")
                         for n in self.zones]
        self._last: dict[str, tuple[float, int]] = {}
        self._total: dict[str, float] = {n: 0.0 for n in self.zones}
        self.backwards: set[str] = set()

    def read(self) -> Sample:
        t = time.monotonic()
        power, energy = {}, {}
        for name, (path, rng) in self.zones.items():
            uj = int((path / "energy_uj").read_text())
            last = self._last.get(name)
            power[name] = None
            if last is not None:
                t0, uj0 = last
                delta = uj - uj0
                if delta < 0:
                    delta += rng
                    if t > t0 and delta / 1e6 / (t - t0) > self.max_power_w:
                        self.backwards.add(name)  # not a wrap: the counter ran backwards
                        delta = 0
                self._total[name] += delta / 1e6
                if t > t0:
                    power[name] = delta / 1e6 / (t - t0)
            self._last[name] = (t, uj)
            energy[name] = self._total[name]
        return Sample(t, power, energy)


# ---- HPE Cray pm_counters --------------------------------------------------------

def _pm_value(path: Path) -> float:
    """pm_counters files read "<value> <unit> <timestamp> us" (unit W or J)."""
    text = path.read_text().split()
    if not text:
        raise SourceError(f"{path.name} is empty")
    return float(text[0])


class PmCountersSource:
    """/sys/cray/pm_counters: node power/energy (including accelerators),
    accel<N>_, cpu_ and memory_ power and energy; `freshness` counts up at
    about 10 Hz while the data is updated (Cray-HPE docs-csm,
    operations/power_management/User_Access_to_Compute_Node_Power_Data.md)."""
    kind = "pm_counters"
    api = "HPE Cray pm_counters sysfs"
    PREFIXES = ("", "cpu_", "memory_")  # node, CPU and memory domains

    def __init__(self, root: Path = Path("/sys/cray/pm_counters"),
                 max_power_w: float = DEFAULT_MAX_POWER_W):
        self.root = Path(root)
        self.max_power_w = max_power_w
        if not (self.root / "power").is_file():
            raise SourceError(f"{self.root}/power does not exist (not an HPE Cray EX node)")
        self.files: dict[str, tuple[str, str]] = {}  # channel -> (power file, energy file)
        for prefix in self.PREFIXES:
            if (self.root / f"{prefix}power").is_file():
                self.files[prefix.rstrip("_") or "node"] = (f"{prefix}power", f"{prefix}energy")
        for path in sorted(self.root.glob("accel*_power")):
            name = path.name[: -len("_power")]
            self.files[name] = (path.name, f"{name}_energy")
        scope_of = {"node": "node", "cpu": "cpu_package", "memory": "dram"}
        self.channels = [Channel(n, scope_of.get(n, "accelerator")) for n in self.files]
        try:
            _pm_value(self.root / "power")
        except PermissionError:
            raise SourceError(f"{self.root}/power is not readable by this user") from None
        self._first: dict[str, float] = {}
        self._freshness: tuple[float, float] | None = None
        self.stale = False

    def read(self) -> Sample:
        t = time.monotonic()
        fresh_path = self.root / "freshness"
        if fresh_path.is_file():
            fresh = _pm_value(fresh_path)
            if self._freshness is not None and fresh == self._freshness[1] \
                    and t - self._freshness[0] >= 0.5:
                self.stale = True  # freshness stands still: the values are old
                raise SourceError("freshness did not advance: the counters are not being updated")
            if self._freshness is None or fresh != self._freshness[1]:
                self._freshness = (t, fresh)
        power, energy = {}, {}
        for name, (pfile, efile) in self.files.items():
            power[name] = _pm_value(self.root / pfile)
            energy[name] = None
            if (self.root / efile).is_file():
                value = _pm_value(self.root / efile)
                self._first.setdefault(name, value)
                energy[name] = value - self._first[name]
        return Sample(t, power, energy)


# ---- the per-source thread ---------------------------------------------------------

@dataclass
class SourceRun:
    """One source sampled in its own thread; the samples and what went wrong."""
    source: object
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
        limit = getattr(self.source, "max_power_w", DEFAULT_MAX_POWER_W)
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
        for name in getattr(self.source, "backwards", ()):
            self.fault(f"{name}: energy counter went backwards")
        if hasattr(self.source, "backwards"):
            self.source.backwards.clear()
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
        if hasattr(self.source, "close"):
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


def _open(kind: str, config: dict, max_w: float):
    section = config.get(kind, {})
    if kind == "rapl":
        return RaplSource(Path(section.get("root", "/sys/class/powercap")), max_w)
    if kind == "pm_counters":
        return PmCountersSource(Path(section.get("root", "/sys/cray/pm_counters")), max_w)
    if kind == "ipmi":
        from hpcai.workloads.node_power_ipmi import IpmiDcmiSource

        return IpmiDcmiSource(section, max_w)
    if kind == "redfish":
        from hpcai.workloads.node_power_redfish import RedfishSource

        return RedfishSource(section, max_w)
    raise SourceError(f"unknown node power source {kind!r}")


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
                         "achieved_interval_s": statistics.median(gaps) if gaps else None,
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
    from hpcai.workloads.efficiency import energy_with_overhead_j

    return (energy_with_overhead_j(gpu_energy_j, overhead_w, window_s),
            f"fixed overhead ({overhead_w:g} W per node)")
