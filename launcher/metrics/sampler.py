"""One reading of the node, cached: however often Prometheus (or several) scrape,
the GPUs and node meters are read at most once per max_age_s.

What a running launcher leaves on the node, and so what this reads for the
limit's holder and the run's state (never the run's own folders, which may be
anywhere): the node's cap authority (launcher/power/authority.py,
/run/hpcai/gpu-<UUID>.holder.json beside a held flock: run id, Slurm job id)
and hpcai-power-helper's job records (launcher/power/job_caps.py). An in-run
sweep's process adds its current segment and that segment's cap to its holder
records (CapSession.mark_segment). Those are
root's 0600 files: an exporter not running as root sees no holder.
"""
from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.gpu.base import GpuDevice, GpuInfo, GpuReading
from hpcai.launcher.power.authority import LOCK_ROOT, holder_of, read_private_json
from hpcai.launcher.power.job_caps import job_record_path

DEFAULT_MAX_AGE_S = 1.0
# launcher/run/spec.py make_run_id: "<stamp>-<host>-<workload>-<preset>[-cap<W>W][-sm..MHz]";
# an in-run sweep's process appends "-inrun" (launcher/sweep/inrun.py).
_CAP_IN_RUN_ID = re.compile(r"-cap([0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)W(?=-|$)")


@dataclass
class GpuSample:
    info: GpuInfo
    reading: GpuReading | None
    error: str | None = None
    # {"kind": "hpcai-run" | "slurm-job", "run_id": str | None, "job_id": str | None}, None: nobody;
    # an in-run sweep's also "segment": int and "segment_cap_w": float
    holder: dict | None = None


@dataclass
class NodeChannel:
    source: str  # the site's source kind: rapl, pm_counters, ipmi, redfish
    channel: str
    scope: str
    power_w: float | None
    energy_j: float | None


@dataclass
class NodeSample:
    taken_unix: float
    gpus: list[GpuSample] = field(default_factory=list)
    node: list[NodeChannel] = field(default_factory=list)
    node_errors: dict = field(default_factory=dict)  # source kind -> reason
    runs: list[dict] = field(default_factory=list)
    read_s: float = 0.0


def run_state(run_id: str, job_id: str | None, uuids: list[str], workloads,
              segment: dict | None = None) -> dict:
    """A run's state from its id: the workload (the catalog name the id holds), the
    cap it asked for, whether it is an in-run sweep's process. Such a process's
    segments change the cap under the same id: `segment` (segment_of) names the
    one running and its cap, which then is the run's cap."""
    parts = f"-{run_id}-"
    workload = next((w for w in sorted(workloads, key=len, reverse=True) if f"-{w}-" in parts), "")
    cap = _CAP_IN_RUN_ID.search(run_id)
    cap_w = float(cap.group(1)) if cap else None
    return {"run_id": run_id, "job_id": job_id or "", "workload": workload,
            "cap_w": segment["segment_cap_w"] if segment else cap_w,
            "segment": segment["segment"] if segment else None,
            "in_run": run_id.endswith("-inrun"), "gpus": sorted(uuids)}


def segment_of(record: dict) -> dict | None:
    """The in-run segment a holder record names ({"segment", "segment_cap_w"}),
    None when it names none or not sensibly (a record from before segments)."""
    index, cap = record.get("segment"), record.get("segment_cap_w")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        return None
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap <= 0:
        return None
    return {"segment": index, "segment_cap_w": float(cap)}


def limit_holder(uuid: str, root: Path = LOCK_ROOT) -> dict | None:
    """Who set the limit in force: an hpcai run holding the GPU's lock, else a Slurm job
    whose user capped it through hpcai-power-helper, else None (the default, or someone
    hpcai does not know of)."""
    held = holder_of(uuid, root)
    if held and held.get("run_id"):
        return {"kind": "hpcai-run", "run_id": str(held["run_id"]),
                "job_id": str(held["job_id"]) if held.get("job_id") else None, **(segment_of(held) or {})}
    record = read_private_json(job_record_path(uuid, root))
    if record and record.get("job_id"):
        return {"kind": "slurm-job", "run_id": None, "job_id": str(record["job_id"])}
    return None


def _later(seen: dict | None, other: dict | None) -> dict | None:
    """Of two GPUs' segments, the later: read while the process rewrites its records
    one GPU after the other, the run is already in the new segment."""
    if seen is None or (other is not None and other["segment"] > seen["segment"]):
        return other
    return seen


class CachedSampler:
    """The node's GPUs and node sources, read once per max_age_s whoever asks."""

    def __init__(self, gpus: list[GpuDevice], node_sources: list | None = None,
                 max_age_s: float = DEFAULT_MAX_AGE_S, lock_root: Path = LOCK_ROOT, workloads=()):
        self.gpus, self.node_sources = list(gpus), list(node_sources or [])
        self.max_age_s, self.lock_root, self.workloads = float(max_age_s), Path(lock_root), tuple(workloads)
        self._lock = threading.Lock()
        self._sample: NodeSample | None = None
        self._taken = float("-inf")  # monotonic
        self.reads = 0  # how many times the node was actually read (for tests and the bench)

    def sample(self) -> NodeSample:
        with self._lock:  # two scrapes at once: one reads, the other gets its sample
            if self._sample is None or time.monotonic() - self._taken >= self.max_age_s:
                self._sample = self._read()
                self._taken = time.monotonic()
                self.reads += 1
            return self._sample

    def _read(self) -> NodeSample:
        start = time.perf_counter()
        sample = NodeSample(taken_unix=time.time())
        sample.gpus = [self._read_gpu(gpu) for gpu in self.gpus]
        self._read_node(sample)
        sample.runs = self._runs(sample.gpus)
        sample.read_s = time.perf_counter() - start
        return sample

    def _read_gpu(self, gpu: GpuDevice) -> GpuSample:
        from hpcai.errors import HpcaiError

        info = gpu.info()
        try:
            reading, error = gpu.read(), None
        except HpcaiError as exc:  # a lost GPU: named, the others still exported
            reading, error = None, exc.one_line()
        return GpuSample(info, reading, error, limit_holder(info.uuid, self.lock_root))

    def _read_node(self, sample: NodeSample) -> None:
        from hpcai.measure.source import SourceError

        for source in self.node_sources:
            try:
                read = source.read()
            except (SourceError, OSError) as exc:
                sample.node_errors[source.kind] = str(exc) or type(exc).__name__
                continue
            for channel in source.channels:
                sample.node.append(NodeChannel(source.kind, channel.name, channel.scope,
                                               read.power_w.get(channel.name), read.energy_j.get(channel.name)))

    def _runs(self, gpus: list[GpuSample]) -> list[dict]:
        by_run: dict[str, dict] = {}
        for gpu in gpus:
            holder = gpu.holder
            if holder and holder["kind"] == "hpcai-run":
                entry = by_run.setdefault(holder["run_id"], {"job_id": holder["job_id"], "uuids": [], "segment": None})
                entry["uuids"].append(gpu.info.uuid)
                entry["segment"] = _later(entry["segment"], segment_of(holder))
        return [run_state(run_id, e["job_id"], e["uuids"], self.workloads, e["segment"])
                for run_id, e in sorted(by_run.items())]

    def close(self) -> None:
        for source in self.node_sources:
            source.close()
