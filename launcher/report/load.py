"""Reading results for the report: result.json files (checked against the
schema), sweep summaries, and the seed paper's reference figures.

Only schema-valid `complete` results are measured values; everything else is
kept, with why, so the report can list it instead of averaging it.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hpcai.errors import ConfigError, UsageError
from hpcai.workloads.efficiency import units_per_joule

REFERENCE_FILE = "reference/seed-paper-throughput.csv"
REFERENCE_COLUMNS = ["workload", "gpu", "cap_w", "throughput", "unit", "enforced"]
UNITS = ("images/s", "tokens/s")

# Model names as the vendors' libraries report them; the first match names the GPU.
_KNOWN_GPUS = re.compile(
    r"\b(GH200|GB200|B200|B100|H200|H100|H800|A100|A800|A40|A30|A10G?|L40S|L40|L4|V100|"
    r"MI355X|MI325X|MI300X|MI300A|MI250X|MI250|MI210|MI100)\b", re.IGNORECASE)
_VENDOR_WORDS = {"nvidia", "amd", "instinct", "tesla", "geforce", "radeon", "pro"}


def short_gpu_name(full: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100", "AMD Instinct MI300X" -> "MI300X"."""
    match = _KNOWN_GPUS.search(full or "")
    if match:
        return match.group(1).upper()
    words = [w for w in (full or "").split() if w.lower() not in _VENDOR_WORDS]
    if not words:
        return full or "GPU"
    first = words[0].split("-")[0]
    if not any(ch.isdigit() for ch in first) and len(words) > 1:
        return f"{first} {words[1]}"
    return first


def workload_key(name: str) -> str:
    """Names compared loosely: "vit-l16", "vit_l16" and "ViT-L16" are one workload."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@dataclass
class Run:
    """One result file, reduced to what the report needs."""

    path: Path
    run_id: str
    status: str  # complete | failed | interrupted | running | invalid | unreadable
    problems: list[str] = field(default_factory=list)
    workload: str = "?"
    preset: str = "?"
    unit: str = "?"  # images/s | tokens/s
    work_unit: str = "?"  # images | tokens
    device_type: str = "?"  # cuda | cpu
    device: str = "?"  # short label: "H100", "MI300X", "CPU"
    device_full: str = "?"  # "NVIDIA H100 80GB HBM3", or the CPU model
    site: str = "?"
    host: str = "?"
    processes: int = 1  # GPUs (or CPU processes) the throughput is divided by
    nodes: int = 1  # >1: one node's part of a multi-node run (Slurm)
    cap_w: float | None = None
    enforced: bool | None = None
    default_limit_w: float | None = None
    per_gpu: float | None = None
    node: float | None = None
    per_epoch_per_gpu: list[float] = field(default_factory=list)
    power_available: bool = False
    power_reason: str | None = None
    energy_j: float | None = None
    window_s: float | None = None
    node_overhead_w: float | None = None
    units: float | None = None
    mean_power_w: float | None = None
    units_per_joule: float | None = None
    units_per_joule_with_overhead: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    samples_path: Path | None = None
    measured_start: float | None = None
    measured_end: float | None = None
    sweep_id: str | None = None
    repeat: int | None = None
    started: str | None = None

    @property
    def usable(self) -> bool:
        """A measured value: schema-valid and complete."""
        return self.status == "complete" and not self.problems and self.per_gpu is not None

    def efficiency(self, overhead_w: float | None = None) -> float | None:
        """Units per joule with a node overhead (None: the one the run stated)."""
        if not self.power_available or self.window_s is None:
            return None
        if overhead_w is None:
            overhead_w = self.node_overhead_w or 0.0
        return units_per_joule(self.units, self.energy_j, overhead_w, self.window_s)

    def gpu_efficiency(self) -> float | None:
        return units_per_joule(self.units, self.energy_j) if self.power_available else None


@dataclass
class Sweep:
    path: Path
    doc: dict


@dataclass(frozen=True)
class RefPoint:
    workload: str
    gpu: str
    cap_w: float
    throughput: float
    unit: str
    enforced: bool


def find_files(paths: list[str | Path]) -> tuple[list[Path], list[Path]]:
    """result.json and sweep.json files under the given files and folders."""
    results, sweeps = [], []
    for given in paths:
        path = Path(given)
        if path.is_file():
            (sweeps if path.name == "sweep.json" else results).append(path)
        elif path.is_dir():
            results.extend(sorted(path.rglob("result.json")))
            sweeps.extend(sorted(path.rglob("sweep.json")))
        else:
            raise UsageError(f"{path} does not exist", "give result files or folders")
    results = list(dict.fromkeys(p.resolve() for p in results))
    if not results:
        raise UsageError(f"no result.json under {', '.join(map(str, paths))}",
                         "give result files, run folders, sweep folders or a results folder")
    return results, list(dict.fromkeys(p.resolve() for p in sweeps))


def load_results(paths: list[str | Path]) -> tuple[list[Run], list[Sweep]]:
    from hpcai.launcher.results import validation_errors

    result_files, sweep_files = find_files(paths)
    runs = []
    for path in result_files:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            runs.append(Run(path, path.parent.name, "unreadable", [f"not readable JSON: {exc}"]))
            continue
        if not isinstance(doc, dict):
            runs.append(Run(path, path.parent.name, "unreadable", ["not a JSON object"]))
            continue
        errors = validation_errors(doc)
        run = _from_doc(path, doc, errors)
        runs.append(run)
    sweeps = []
    for path in sweep_files:
        try:
            sweeps.append(Sweep(path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return runs, sweeps


def _from_doc(path: Path, doc: dict, errors: list[str]) -> Run:
    run = Run(path, str(doc.get("run_id") or path.parent.name),
              "invalid" if errors else str(doc.get("status")))
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        run.problems.append(f"does not match the result schema: {errors[0]}{more}")
    try:
        _fill(run, path, doc)
    except (KeyError, TypeError, ValueError) as exc:  # only reachable for invalid files
        run.status = "invalid"
        run.problems.append(f"missing or malformed field {exc}")
    if run.status == "complete" and run.per_gpu is None:
        run.problems.append("complete but without a throughput")
    if run.status == "complete" and not isinstance(doc.get("launcher"), dict):
        # The workload outlived a killed launcher: no cap check, limits maybe restored under it.
        run.problems.append("written without its launcher's finishing step (no cap check; "
                            "the launcher was killed)")
    return run


def _fill(run: Run, path: Path, doc: dict) -> None:
    spec = doc["spec"]
    run.workload = doc["workload"]
    run.preset = spec.get("preset", "?")
    run.unit = doc["throughput"]["unit"]
    run.work_unit = doc["work"]["unit"]
    run.site = (spec.get("site") or {}).get("name") or "?"
    host = doc.get("host") or {}
    run.host = host.get("node") or host.get("hostname") or "?"
    run.started = (doc.get("timestamps") or {}).get("started")
    config = doc.get("config") or {}
    run.device_type = config.get("device_type") or (spec.get("devices") or {}).get("type") or "?"
    used = [g for g in doc.get("gpus") or [] if g.get("used")]
    if run.device_type == "cuda" and used:
        names = list(dict.fromkeys(g["name"] for g in used))
        run.device_full = " + ".join(names)
        run.device = " + ".join(short_gpu_name(n) for n in names)
    else:
        run.device_full = host.get("cpu_model") or "CPU"
        run.device = "CPU"
    run.processes = int(config.get("processes") or (spec.get("devices") or {}).get("nproc") or 1)
    if run.device_type == "cuda" and used:
        run.processes = len(used)
    run.nodes = int((spec.get("slurm") or {}).get("nodes") or 1)
    run.cap_w = spec["power"]["cap_w"]
    cap = (doc.get("power") or {}).get("cap") or {}
    run.enforced = cap.get("enforced") if run.cap_w is not None else None
    defaults = [(g.get("limits") or {}).get("default_w") for g in used]
    run.default_limit_w = defaults[0] if defaults and defaults[0] is not None else None
    tp = doc["throughput"]
    run.per_gpu, run.node = tp.get("per_gpu"), tp.get("node")
    # Epochs per GPU in the same proportion as the result's own per-GPU figure.
    share = run.per_gpu / run.node if run.per_gpu is not None and run.node else 1 / run.processes
    run.per_epoch_per_gpu = [v * share for v in tp.get("per_epoch_node") or []]
    power = doc["power"]
    run.power_available = bool(power.get("available"))
    run.power_reason = power.get("reason")
    run.energy_j = power.get("energy_j")
    run.window_s = power.get("window_s")
    run.node_overhead_w = power.get("node_overhead_w")
    run.mean_power_w = power.get("mean_power_w")
    run.units_per_joule = power.get("units_per_joule")
    run.units_per_joule_with_overhead = power.get("units_per_joule_with_overhead")
    run.units = (doc.get("work") or {}).get("measured_units")
    run.sm_clock_mhz = _mean([g.get("sm_clock_mhz_mean") for g in used])
    run.memory_clock_mhz = _mean([g.get("memory_clock_mhz_mean") for g in used])
    samples = (doc.get("sidecar") or {}).get("samples")
    if samples and (path.parent / samples).is_file():
        run.samples_path = path.parent / samples
    stamps = doc.get("timestamps") or {}
    run.measured_start, run.measured_end = stamps.get("measured_start"), stamps.get("measured_end")
    sweep = spec.get("sweep") or {}
    run.sweep_id, run.repeat = sweep.get("id"), sweep.get("repeat")


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


# ---- the seed paper's figures ------------------------------------------------------
def load_reference(path: str | Path | None = None) -> list[RefPoint]:
    """The packaged CSV (or another with the same columns); '#' lines are comments."""
    if path is None:
        text = resources.files("hpcai").joinpath(REFERENCE_FILE).read_text()
        where = f"hpcai/{REFERENCE_FILE}"
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read reference file {path} ({exc.strerror})",
                              "check the path given to --reference-file") from None
        where = str(path)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ConfigError(f"reference file {where} has no rows", f"columns: {REFERENCE_COLUMNS}")
    header = [h.strip() for h in next(csv.reader([lines[0][1]]))]
    if header != REFERENCE_COLUMNS:
        raise ConfigError(f"reference file {where} has columns {header}",
                          f"expected {','.join(REFERENCE_COLUMNS)}")
    points = []
    for number, line in lines[1:]:
        cells = [c.strip() for c in next(csv.reader([line]))]
        try:
            if len(cells) != len(REFERENCE_COLUMNS):
                raise ValueError(f"{len(cells)} fields")
            workload, gpu, cap, value, unit, enforced = cells
            if unit not in UNITS or enforced not in ("true", "false"):
                raise ValueError(f"unit {unit!r} or enforced {enforced!r}")
            point = RefPoint(workload, gpu, float(cap), float(value), unit, enforced == "true")
            if point.cap_w <= 0 or point.throughput < 0:
                raise ValueError("negative number")
        except ValueError as exc:
            raise ConfigError(f"reference file {where} line {number} is malformed ({exc})",
                              "fix the line or leave it out") from None
        points.append(point)
    return points
