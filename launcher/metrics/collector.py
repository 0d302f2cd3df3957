"""The metric families, built from one cached sample per scrape (sampler.py).

Names follow Prometheus' conventions (base units, _total on counters) under
hpcai_. Where dcgm-exporter has a field of the same meaning, DCGM_EQUIVALENTS
names it (docs/how-to/monitoring.md's table is this dict; the dashboard falls
back to dcgm's name where hpcai's exporter does not run). The labels differ:
dcgm-exporter's are UUID, gpu, modelName; ours are uuid, index, model.
"""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hpcai.gpu.nvidia import THROTTLE_BITS
from hpcai.launcher.metrics.sampler import CachedSampler, GpuSample, NodeSample

GPU_LABELS = ["uuid", "model", "index"]
# hpcai metric (as exposed) -> dcgm-exporter's metric of the same meaning, and the unit it uses.
DCGM_EQUIVALENTS = {
    "hpcai_gpu_power_watts": ("DCGM_FI_DEV_POWER_USAGE", "W"),
    "hpcai_gpu_energy_joules_total": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ"),
    "hpcai_gpu_power_limit_watts": ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "W"),
    "hpcai_gpu_sm_clock_hertz": ("DCGM_FI_DEV_SM_CLOCK", "MHz"),
    "hpcai_gpu_memory_clock_hertz": ("DCGM_FI_DEV_MEM_CLOCK", "MHz"),
    "hpcai_gpu_temperature_celsius": ("DCGM_FI_DEV_GPU_TEMP", "°C"),
}
# Every throttle reason gets a 0/1 series, so a panel shows "not throttled" as 0, not as no data.
KNOWN_THROTTLE_REASONS = tuple(THROTTLE_BITS.values())


def _gauge(name: str, doc: str, labels=GPU_LABELS, unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels, unit=unit)


class NodeCollector:
    """A prometheus_client custom collector: every scrape reads the sampler's cache."""

    def __init__(self, sampler: CachedSampler):
        self.sampler = sampler

    def collect(self):
        sample = self.sampler.sample()
        yield from self._gpu_families(sample)
        yield from self._node_families(sample)
        yield from self._run_families(sample)
        read = _gauge("hpcai_exporter_read_seconds", "Wall time of the last read of the node (GPUs, "
                      "node meters, holders)", labels=[])
        read.add_metric([], sample.read_s)
        yield read

    def _gpu_families(self, sample: NodeSample):
        fams = {
            "power": _gauge("hpcai_gpu_power_watts", "GPU board power (instant where the library has it, "
                            "else its average)"),
            "energy": CounterMetricFamily("hpcai_gpu_energy_joules", "GPU energy counter since the driver "
                                          "loaded", labels=GPU_LABELS),
            "limit": _gauge("hpcai_gpu_power_limit_watts", "Power limit in force (enforced)"),
            "sm": _gauge("hpcai_gpu_sm_clock_hertz", "SM (graphics) clock"),
            "mem": _gauge("hpcai_gpu_memory_clock_hertz", "Memory clock"),
            "temp": _gauge("hpcai_gpu_temperature_celsius", "GPU temperature"),
            "throttle": _gauge("hpcai_gpu_throttle_reason", "1 while the reason holds clocks down, else 0",
                               labels=[*GPU_LABELS, "reason"]),
            "holder": _gauge("hpcai_gpu_power_limit_holder", "Who set the limit in force: 1 for the holder "
                             "(kind hpcai-run or slurm-job; none when no hpcai record names one)",
                             labels=[*GPU_LABELS, "kind", "run_id", "job_id"]),
            "up": _gauge("hpcai_gpu_up", "1 when the GPU answered this read, 0 when it failed (lost GPU)"),
        }
        for gpu in sample.gpus:
            _add_gpu(fams, gpu)
        yield from fams.values()

    def _node_families(self, sample: NodeSample):
        labels = ["source", "channel", "scope"]
        power = _gauge("hpcai_node_power_watts", "Power from the site's node sources", labels=labels)
        energy = CounterMetricFamily("hpcai_node_energy_joules", "Energy from the site's node sources "
                                     "since the exporter opened them", labels=labels)
        up = _gauge("hpcai_node_power_source_up", "1 when the node source answered this read", labels=["source"])
        for ch in sample.node:
            key = [ch.source, ch.channel, ch.scope]
            if ch.power_w is not None:
                power.add_metric(key, ch.power_w)
            if ch.energy_j is not None:
                energy.add_metric(key, ch.energy_j)
        for kind in sorted({ch.source for ch in sample.node} | set(sample.node_errors)):
            up.add_metric([kind], 0.0 if kind in sample.node_errors else 1.0)
        yield from (power, energy, up)

    def _run_families(self, sample: NodeSample):
        info = _gauge("hpcai_run_info", "An hpcai run holding GPUs of this node: 1 per run",
                      labels=["run_id", "job_id", "workload", "in_run"])
        cap = _gauge("hpcai_run_cap_watts", "The cap the run asked for (an in-run sweep: its current "
                     "segment's)", labels=["run_id"])
        segment = _gauge("hpcai_run_segment", "An in-run sweep's segment running now (0 for the first)",
                         labels=["run_id"])
        gpus = _gauge("hpcai_run_gpus", "GPUs the run holds on this node", labels=["run_id"])
        for run in sample.runs:
            info.add_metric([run["run_id"], run["job_id"], run["workload"], str(run["in_run"]).lower()], 1.0)
            gpus.add_metric([run["run_id"]], float(len(run["gpus"])))
            if run["cap_w"] is not None:
                cap.add_metric([run["run_id"]], run["cap_w"])
            if run["segment"] is not None:
                segment.add_metric([run["run_id"]], float(run["segment"]))
        yield from (info, cap, segment, gpus)


def _add_gpu(fams: dict, gpu: GpuSample) -> None:
    labels = [gpu.info.uuid, gpu.info.name, str(gpu.info.index)]
    fams["up"].add_metric(labels, 0.0 if gpu.reading is None else 1.0)
    holder = gpu.holder or {"kind": "none", "run_id": None, "job_id": None}
    fams["holder"].add_metric([*labels, holder["kind"], holder["run_id"] or "", holder["job_id"] or ""], 1.0)
    reading = gpu.reading
    if reading is None:
        return
    for key, value, scale in (("power", reading.power_w, 1.0), ("energy", reading.energy_j, 1.0),
                              ("limit", reading.power_limit_w, 1.0), ("sm", reading.sm_clock_mhz, 1e6),
                              ("mem", reading.memory_clock_mhz, 1e6), ("temp", reading.temperature_c, 1.0)):
        if value is not None:  # the device cannot say: no series, never a made-up 0
            fams[key].add_metric(labels, value * scale)
    if reading.throttle_reasons is not None:
        active = set(reading.throttle_reasons)
        for reason in sorted(active | set(KNOWN_THROTTLE_REASONS)):
            fams["throttle"].add_metric([*labels, reason], 1.0 if reason in active else 0.0)


def registry_for(sampler: CachedSampler):
    """A registry of its own holding only this node's collector (no process or
    platform collectors: a scrape reads the node once, nothing else)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(sampler))
    return registry


def exposition(registry) -> bytes:
    """The Prometheus text format (0.0.4), as node_exporter's textfile collector reads it."""
    from prometheus_client import generate_latest

    return generate_latest(registry)


def exposed_names(registry) -> set[str]:
    """Every sample name one scrape exposes (the dashboard test checks against these)."""
    return {s.name for family in registry.collect() for s in family.samples}
