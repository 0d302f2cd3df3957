"""Turns what a run measured into the result document's figures (schema v1);
the document's skeleton, cleaning and writing are hpcai/result_document.py's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.measure import cap_binding
from hpcai.measure.efficiency import units_per_joule
from hpcai.measure.node_power import energy_with_node, node_section
from hpcai.measure.stats import throughput_stats
from hpcai.measure.telemetry import integrate_power_j, window_stats

# Counter and integrated energy further apart than this: trust neither blindly.
ENERGY_AGREEMENT_FRAC = 0.25
# NVML's power sensor covers only part of each period on A100/H100 ("only 25%
# of the runtime is sampled", Yang et al., SC24, arXiv 2312.02741): a measured
# window shorter than this is flagged as unreliable.
MIN_WINDOW_S = 10.0
# Fewer power samples than this share of window / interval: flagged.
MIN_SAMPLE_FRAC = 0.5
# A counter that stays put this long while power is drawn has frozen.
FROZEN_AFTER_S = 2.0


def node_throughput(ranks: list[dict]) -> dict:
    """Per epoch: units of all ranks over the slowest rank's time."""
    measured = [[e for e in r["epochs"] if not e["warmup"]] for r in ranks]
    n_epochs = min((len(m) for m in measured), default=0)
    per_epoch, units_total, time_total = [], 0, 0.0
    for i in range(n_epochs):
        units = sum(m[i]["units"] for m in measured)
        seconds = max(m[i]["duration_s"] for m in measured)
        per_epoch.append(units / seconds if seconds > 0 else 0.0)
        units_total += units
        time_total += seconds
    per_rank = []
    for m in measured:
        secs = sum(e["duration_s"] for e in m[:n_epochs])
        per_rank.append(sum(e["units"] for e in m[:n_epochs]) / secs if secs > 0 else None)
    node = units_total / time_total if time_total > 0 else None
    return {
        "node": node,
        "per_gpu": node / len(ranks) if node is not None else None,
        "per_rank": per_rank,
        "per_epoch_node": per_epoch,
        "stats_node": throughput_stats(per_epoch),
        "measured_units": units_total,
        "measured_seconds": time_total,
    }


def source_energy(sampler, index: int, t0: float, t1: float) -> dict:
    """Energy over [t0, t1] from the counter and from the power samples."""
    counter = _counter_from_marks(sampler, index, t0, t1)
    if counter is None:  # engine-driven workloads: no marks at their boundaries
        counter = _counter_from_samples(sampler, index, t0, t1)
    series = sampler.series(index, t0, t1)
    integrated = None
    if len(series) >= 2:
        span = series[-1][0] - series[0][0]
        trapz = integrate_power_j(series)
        if trapz is not None and span > 0:
            # Mean power over the samples, stretched to the whole window.
            integrated = trapz / span * (t1 - t0)
    used, note = None, None
    problem = counter_problem(sampler, index, t0, t1, counter)
    if problem is not None:
        # A frozen or backwards counter (ROCm/amdsmi#38, #115): never the figure.
        note = f"energy counter {problem}; " + ("using integrated power" if integrated is not None
                                                else "no energy figure")
        used = "integrated" if integrated is not None else None
        value = integrated if integrated is not None else None
        return {"counter": counter, "integrated": integrated, "used": used, "value": value,
                "note": note}
    if counter is not None and (integrated is None or _agree(counter, integrated)):
        used = "counter"
    elif integrated is not None:
        used = "integrated"
        if counter is not None:
            note = (f"energy counter ({counter:.1f} J) and integrated power "
                    f"({integrated:.1f} J) disagree; using integrated power")
    elif counter is not None:
        used = "counter"
    value = {"counter": counter, "integrated": integrated}.get(used)
    return {"counter": counter, "integrated": integrated, "used": used, "value": value,
            "note": note}


def counter_problem(sampler, index: int, t0: float, t1: float,
                    counter: float | None) -> str | None:
    """Why the energy counter cannot be trusted over [t0, t1], or None."""
    if counter is not None and counter < 0:
        return "ran backwards"
    points = [(t, row[index]) for t, row in zip(sampler.times, sampler.readings)
              if t0 <= t <= t1 and row[index] is not None and row[index].energy_j is not None]
    if any(b.energy_j < a.energy_j for (_, a), (_, b) in zip(points, points[1:])):
        return "ran backwards"
    if any(getattr(r, "counter_backwards", False) for _, r in points):
        return "ran backwards"  # a reader that unwraps its counter saw it (RAPL)
    if len(points) >= 2 and points[-1][0] - points[0][0] >= FROZEN_AFTER_S:
        drawn = [r.power_w for _, r in points if r.power_w]
        if points[-1][1].energy_j == points[0][1].energy_j and drawn and max(drawn) > 1.0:
            return "stood still while power was drawn"
    return None


def _counter_from_marks(sampler, index: int, t0: float, t1: float) -> float | None:
    """The protocol marks just before an epoch starts and just after it ends."""
    slack = max(2 * sampler.interval_s, 0.05)
    start = next((m for m in reversed(sampler.marks) if t0 - slack <= m.t <= t0), None)
    end = next((m for m in sampler.marks if t1 <= m.t <= t1 + slack), None)
    if start is None or end is None:
        return None
    if start.energy_j[index] is None or end.energy_j[index] is None:
        return None
    return end.energy_j[index] - start.energy_j[index]


def _counter_from_samples(sampler, index: int, t0: float, t1: float) -> float | None:
    """The counter read by every tick, interpolated to the window's edges."""
    points = [(t, row[index].energy_j) for t, row in zip(sampler.times, sampler.readings)
              if row[index] is not None and row[index].energy_j is not None]
    if len(points) < 2 or points[0][0] > t0 or points[-1][0] < t1:
        return None  # the samples must cover the window
    return _interpolate(points, t1) - _interpolate(points, t0)


def _interpolate(points: list[tuple[float, float]], t: float) -> float:
    for (ta, ea), (tb, eb) in zip(points, points[1:]):
        if ta <= t <= tb:
            return ea if tb == ta else ea + (eb - ea) * (t - ta) / (tb - ta)
    raise ValueError("t outside the samples")


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= ENERGY_AGREEMENT_FRAC * max(abs(b), 1e-9)


def power_section(spec: dict, discovery, sampler, window, units: int,
                  node=None) -> tuple[list, list, dict]:
    """Per-GPU (or per-CPU-package) figures and the node's energy efficiency.
    node: the NodePowerSampler, or None; its figures go to power["node_power"]."""
    overhead_w = float(spec["power"].get("node_overhead_w", 100.0))
    used_indices = spec["devices"].get("gpu_indices")
    read = _read_sources(discovery, sampler, window, used_indices)
    energies = read.energies
    available = bool(energies) and all(e is not None for e in energies)
    window_s = (window[1] - window[0]) if window else None
    energy = sum(energies) if available else None
    node_power = with_node = with_node_basis = None
    if node is not None:
        node_power = node_section(node.summary(window), energy if available else None,
                                  window_s, node.status)
    if available or (node_power and node_power["node_energy_j"] is not None):
        with_node, with_node_basis = energy_with_node(node_power, energy, overhead_w, window_s)
    quality = window_quality(sampler, window, read.power_counts)
    power = {
        "available": available,
        "reason": None if available else _why_no_energy(spec, discovery, window),
        "source": (discovery.vendor if discovery and discovery.kind == "gpu"
                   else "rapl" if discovery and discovery.kind == "rapl" else None),
        "energy_scope": read.scope,
        "energy_source": _energy_source([g["energy_j"] for g in read.gpus if g["used"]] or
                                        [p["energy_j"] for p in read.packages]),
        "notes": read.notes + _quality_notes(quality, window_s),
        "quality": quality,
        "window_s": window_s,
        "energy_j": energy,
        "mean_power_w": energy / window_s if available and window_s else None,
        "node_overhead_w": overhead_w,
        "energy_with_overhead_j": with_node,
        "energy_with_overhead_basis": with_node_basis,
        "boundaries": _boundaries(discovery, read.scope, node_power, with_node_basis),
        "node_power": node_power,
        "energy_per_unit_j": energy / units if available and units else None,
        "units_per_joule": units_per_joule(units, energy) if available else None,
        "units_per_joule_with_overhead": units_per_joule(units, with_node),
        # What the energy figures stand on: counter, node-meter or analyzer (hpcai/measure/tier.py).
        "tier": _tier(spec),
        # Did the cap bind over this window (hpcai/measure/cap_binding.py)?
        "cap_binding": cap_binding.section(sampler, discovery, window, used_indices),
    }
    return read.gpus, read.packages, power


def _tier(spec: dict) -> dict:
    """This process's reading; the launcher judges it again on the host (a container's
    user namespace hides the calibration's real owner: launcher/run/process.py)."""
    from hpcai.launcher.site.tier import current_tier

    return current_tier(spec.get("node_power") or {})


@dataclass
class _Readings:
    """What the window's sources gave: per-GPU and per-package entries, the used
    sources' energies and power sample counts, and notes about them."""

    scope: str | None = None
    gpus: list = field(default_factory=list)
    packages: list = field(default_factory=list)
    energies: list = field(default_factory=list)
    power_counts: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def _read_sources(discovery, sampler, window, used_indices) -> _Readings:
    read = _Readings()
    if discovery is None or sampler is None or window is None:
        return read
    t0, t1 = window
    if discovery.kind == "gpu":
        read.scope = "gpus"
        for i, device in enumerate(discovery.gpus):
            info = device.info()
            used = used_indices is None or info.index in used_indices
            energy = source_energy(sampler, i, t0, t1)
            read.gpus.append({**info.to_dict(), "used": used,
                              **window_stats(sampler.series(i, t0, t1)), "energy_j": energy})
            if not used:
                continue
            read.power_counts.append(_power_samples(sampler, i, t0, t1))
            read.energies.append(energy["value"])
            if energy["note"]:
                read.notes.append(f"GPU {info.index}: {energy['note']}")
            if info.mig_enabled:
                read.notes.append(f"GPU {info.index} is in MIG mode: its power and energy are "
                                  "the whole GPU's, shared by every MIG instance")
    elif discovery.kind == "rapl":
        read.scope = "cpu_packages"
        for i, domain in enumerate(discovery.rapl):
            energy = source_energy(sampler, i, t0, t1)
            read.packages.append({"name": domain.name, "path": str(domain.path),
                                  **window_stats(sampler.series(i, t0, t1)), "energy_j": energy})
            read.power_counts.append(_power_samples(sampler, i, t0, t1))
            read.energies.append(energy["value"])
    return read


def _why_no_energy(spec: dict, discovery, window) -> str:
    if discovery is None:
        return ("telemetry was turned off for this run" if not spec["protocol"].get("telemetry", True)
                else "telemetry did not start (see the run's error)")
    if discovery.kind is None or (discovery.kind == "gpu" and not discovery.gpus):
        return discovery.reason or "no GPU of the run could be read"
    if window is None:
        return "no measured epoch completed"
    return "too few power samples in the measured window"


def _quality_notes(quality: dict | None, window_s: float | None) -> list[str]:
    if quality is None:
        return []
    notes = []
    if quality["window_short"]:
        notes.append(f"the measured window ({window_s:.1f} s) is shorter than "
                     f"{MIN_WINDOW_S:g} s: the power sensor samples only part of each period")
    if quality["samples_short"]:
        notes.append(f"only {quality['power_samples_min']} power samples where "
                     f"{quality['power_samples_expected']} were expected")
    return notes


GPU_API = {"nvidia": "NVML (nvidia-ml-py)", "amd": "amdsmi", "rapl": "Linux powercap sysfs (intel-rapl)"}


def _boundaries(discovery, scope, node_power, with_node_basis) -> dict:
    """Per energy figure of this section: the boundary it covers and the API."""
    out = {}
    if scope is not None:
        source = discovery.vendor if scope == "gpus" else "rapl"
        out["energy_j"] = {"boundary": "GPU board" if scope == "gpus" else "CPU package",
                           "api": GPU_API.get(source, source)}
    if with_node_basis is not None:
        if with_node_basis.startswith("measured"):
            entry = next(e for e in node_power["sources"] if e["scope"] == "node"
                         and e["energy_j"] is not None)
            out["energy_with_overhead_j"] = {"boundary": "node", "api": entry["api"]}
        else:
            out["energy_with_overhead_j"] = {
                "boundary": (out.get("energy_j", {}).get("boundary", "?") + " + fixed node overhead"),
                "api": out.get("energy_j", {}).get("api", "?") + " + site config"}
    return out


def _power_samples(sampler, index: int, t0: float, t1: float) -> int:
    return sum(1 for _, r in sampler.series(index, t0, t1) if r.power_w is not None)


def window_quality(sampler, window, counts: list[int]) -> dict | None:
    """Is the window long enough, and did enough power samples (per source)
    land in it?"""
    if sampler is None or window is None or not counts:
        return None
    window_s = window[1] - window[0]
    expected = int(window_s / sampler.interval_s)
    fewest = min(counts)
    return {
        "min_window_s": MIN_WINDOW_S,
        "window_short": window_s < MIN_WINDOW_S,
        "power_samples_expected": expected,
        "power_samples_min": fewest,
        "samples_short": fewest < MIN_SAMPLE_FRAC * expected,
    }


def _energy_source(entries: list[dict]) -> str | None:
    used = {e["used"] for e in entries if e["used"]}
    if not used:
        return None
    return used.pop() if len(used) == 1 else "mixed"


def measured_window(progress_epochs: list[dict]) -> tuple[float, float] | None:
    measured = [e for e in progress_epochs if not e["warmup"]]
    if not measured:
        return None
    return measured[0]["start"], measured[-1]["end"]


def phase_energy(spec: dict, discovery, sampler, phases: dict) -> dict:
    """Energy of the used GPUs (or CPU packages) over each named phase {name: {start, end}}:
    the counter interpolated at the phase's edges, else integrated power (source_energy)."""
    used_indices = spec["devices"].get("gpu_indices")
    sources = []
    if discovery is not None and sampler is not None:
        if discovery.kind == "gpu":
            sources = [i for i, d in enumerate(discovery.gpus)
                       if used_indices is None or d.info().index in used_indices]
        elif discovery.kind == "rapl":
            sources = list(range(len(discovery.rapl)))
    out = {}
    for name, phase in phases.items():
        t0, t1 = float(phase["start"]), float(phase["end"])
        values = [source_energy(sampler, i, t0, t1)["value"] for i in sources] if t1 > t0 else []
        energy = sum(values) if values and all(v is not None for v in values) else None
        out[name] = {"start": t0, "end": t1, "duration_s": max(0.0, t1 - t0), "energy_j": energy,
                     "mean_power_w": energy / (t1 - t0) if energy is not None and t1 > t0 else None}
    return out
