"""Reading results for the report: result.json files (checked against the
schema), sweep summaries, and the seed paper's reference figures.

Only schema-valid `complete` results are measured values; everything else is
kept, with why, so the report can list it instead of averaging it.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.measure.stats import mean_of_known
from hpcai.errors import UsageError
from hpcai.launcher.report.points import RefPoint
from hpcai.measure.efficiency import units_per_joule
from hpcai.measure.gpu_names import short_name
from hpcai.printable import printable

REFERENCE_FILE = "reference/seed-paper-throughput.csv"
REFERENCE_COLUMNS = ["workload", "gpu", "cap_w", "throughput", "unit", "enforced"]
UNITS = ("images/s", "samples/s", "tokens/s")


@dataclass(slots=True)  # 100,000 runs in one report: no per-instance dict
class Run:
    """One result file, reduced to what the report needs."""

    # The file's path as text (os.fspath; bytes that are not UTF-8 as surrogates): a
    # fleet's 100,000 Path objects cost most of a second to rebuild from the index.
    path: str
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
    gpu_memory_bytes: int | None = None  # the first used GPU's: tells device variants apart
    site: str = "?"
    host: str = "?"
    processes: int = 1  # GPUs (or CPU processes) the throughput is divided by
    nodes: int = 1  # >1: one node's part of a multi-node run (Slurm)
    slurm_job: str | None = None  # the nodes of one multi-node job measure together
    cap_w: float | None = None
    cap_read: bool = False  # False: the file was unreadable, its cap unknown (not "uncapped")
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
    # Measured node energy over the window (power.node_power), and the result's power
    # section as written: the boundaries report (report/boundaries.py) reads it.
    node_energy_j: float | None = None
    power_doc: dict = field(default_factory=dict)
    # Serving: workload_metrics.serving_phases (prefill/decode time, energy, J per token).
    serving_phases: dict | None = None
    facility: dict = field(default_factory=dict)  # the site's pue, carbon, price (spec.facility)
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    # Clock caps the run asked for (--sm-clock/--mem-clock, spec.power.clocks), MHz.
    sm_clock_cap_mhz: int | None = None
    mem_clock_cap_mhz: int | None = None
    power_profile: str | None = None  # --power-profile (spec.power.profile, schema 1.1)
    samples_path: str | None = None  # the samples file's path, as text (as path above)
    measured_start: float | None = None
    measured_end: float | None = None
    sweep_id: str | None = None
    repeat: int | None = None
    started: str | None = None
    # result.comparability (None: a result from before it existed); see report/reference.py.
    preset_kind: str | None = None
    comparable_to_paper: bool | None = None
    comparability_reasons: list[str] = field(default_factory=list)
    # For the roofline (report/roofline.py): the run's precision, FLOPs and bytes moved per unit.
    precision: str | None = None
    flops_per_unit: float | None = None
    bytes_per_unit: float | None = None
    # --vary: the run's grid point ({param: value}); scaling studies (report/scaling.py).
    point: dict = field(default_factory=dict)
    achieved_tflops_node: float | None = None
    fraction_of_peak: float | None = None
    input: dict | None = None  # the runtime split where data came from storage (--data)
    scaling: str | None = None  # --scaling of a node-scaling job: strong | weak
    # result.validity (hpcai/measure/validity.py): its verdict, None for a result written
    # before validity existed (loaded as before: complete and schema-valid is enough);
    # failed_checks: names of the failed checks, which keep the run out of every figure.
    validity_verdict: str | None = None
    failed_checks: list[str] = field(default_factory=list)
    # Signed bundles (report/origins.py): the site that measured the run and whether its
    # bundle verified (verified | unsigned | failed); a failed one is never averaged.
    origin: str | None = None
    verification: str | None = None
    # sha256 of the file's bytes: with run_id, the run's identity (a copy is a duplicate).
    content_hash: str = ""
    duplicate_of: str | None = None  # the path of the copy that is counted

    @property
    def usable(self) -> bool:
        """A measured value: schema-valid and complete."""
        return self.status == "complete" and not self.problems and self.per_gpu is not None

    def efficiency(self, overhead_w: float | None = None) -> float | None:
        """Units per joule with a node overhead (None: the one the run stated)."""
        if not self.power_available or self.window_s is None:
            return None
        if overhead_w is None:
            if self.node_energy_j:  # measured: preferred to the stated fixed overhead
                return self.units / self.node_energy_j
            overhead_w = self.node_overhead_w or 0.0
        return units_per_joule(self.units, self.energy_j, overhead_w, self.window_s)

    def gpu_efficiency(self) -> float | None:
        return units_per_joule(self.units, self.energy_j) if self.power_available else None


def shown_path(path: Path | str) -> str:
    """A path as text that any page or terminal can hold: bytes that are not
    UTF-8 (kept by Python as lone surrogates) shown as \\xNN escapes."""
    return printable(os.fsencode(path).decode("utf-8", "backslashreplace"))


def shown_text(text: str) -> str:
    """Text from a result (JSON may carry lone surrogates such as "\\udcff"), control
    characters escaped (hpcai/printable.py: a newline or escape code in a name someone
    else chose never reaches a terminal, report.md or a CSV raw)."""
    return printable(text.encode("utf-8", "backslashreplace").decode("utf-8"))


@dataclass
class Sweep:
    path: Path
    doc: dict


def find_files(paths: list[str | Path], allow_empty: bool = False) -> tuple[list[Path], list[Path]]:
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
    if not results and not allow_empty:  # --reference alone: the paper's tables
        raise UsageError(f"no result.json under {', '.join(map(str, paths))}",
                         "give result files, run folders, sweep folders or a results folder")
    return results, list(dict.fromkeys(p.resolve() for p in sweeps))


def read_runs(paths: list[str | Path], allow_empty: bool = False) -> tuple[list[Run], list[Sweep]]:
    """Every result under paths (through the results store: report/store.py, which
    reads only new or changed files) and the sweeps' summaries."""
    indexed = load_indexed(paths, allow_empty)
    return indexed.runs, indexed.sweeps


def load_indexed(paths: list[str | Path], allow_empty: bool = False):
    """read_runs's runs and sweeps, with the store's walk (report/store.py Indexed)."""
    import sys

    from hpcai.launcher.report.store import index

    indexed = index(kit(), paths, allow_empty)
    if indexed.note:
        print(f"note: {indexed.note}", file=sys.stderr)
    return indexed


def kit():
    """What the results store reduces each file to: a Run, by _from_doc."""
    from hpcai.launcher.report.ingest import Kit

    return Kit(Run, _from_doc, Sweep)


def _from_doc(path: Path, doc: dict, errors: list[str]) -> Run:
    run = Run(os.fspath(path), shown_text(str(doc.get("run_id") or shown_path(path.parent.name))),
              "invalid" if errors else str(doc.get("status")))
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        run.problems.append(f"does not match the result schema: {errors[0]}{more}")
    try:
        _fill(run, path, doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # only for invalid files
        run.status = "invalid"
        run.problems.append(f"missing or malformed field {exc}")
    if run.status == "complete" and run.per_gpu is None:
        run.problems.append("complete but without a throughput")
    _validity(run, doc)
    _tampered(run, path, doc)
    _trust(run, path)
    if run.status == "complete" and not isinstance(doc.get("launcher"), dict):
        # The workload outlived a killed launcher: no cap check, limits maybe restored under it.
        run.problems.append("written without its launcher's finishing step (no cap check; "
                            "the launcher was killed)")
    return run


def _trust(run: Run, path: Path) -> None:
    """A result another user could have written or replaced is left out (launcher/site/trust.py)."""
    from hpcai.launcher.site.trust import HOW_TO_TRUST, untrusted

    why = untrusted(path)
    if why:
        run.problems.append(f"not trusted: {shown_text(why)}; {HOW_TO_TRUST}")


def _validity(run: Run, doc: dict) -> None:
    """A failed validity check keeps the run out of every figure, named in its problems."""
    from hpcai.measure.validity import describe, failed_checks

    validity = doc.get("validity")
    if not isinstance(validity, dict):
        return  # written before validity checks: judged as before (status, schema, launcher)
    run.validity_verdict = validity.get("verdict")
    failed = failed_checks(validity)
    run.failed_checks = list(dict.fromkeys(c.get("name", "?") for c in failed))
    if failed:
        run.problems.append("failed validity check(s): "
                            + "; ".join(shown_text(describe(c)) for c in failed))


def _tampered(run: Run, path: Path, doc: dict) -> None:
    """A complete result whose figures do not hold to its own records (recomputed:
    bundles/recompute.py, the rule `check` and `results verify` apply) is not counted,
    whatever validity block it carries."""
    from hpcai.launcher.bundles.recompute import tampered
    from hpcai.measure.validity import describe

    if run.status != "complete":
        return
    failed = tampered(doc, path)
    if failed:
        run.validity_verdict = "fail"
        run.failed_checks = list(dict.fromkeys([*run.failed_checks, *(c["name"] for c in failed)]))
        run.problems.append("failed validity check(s) recomputed now: "
                            + "; ".join(shown_text(f"{describe(c)} ({c.get('note')})") for c in failed))


def _label(value) -> str:
    """A name the report prints (workload, preset, site, host, device): text as it
    is, anything else an invalid result holds there ("preset": 5) as its JSON text;
    missing or empty: "?"."""
    if value is None or value == "":
        return "?"
    if not isinstance(value, str):
        value = json.dumps(value, default=str)
    return shown_text(value)


def _fill(run: Run, path: Path, doc: dict) -> None:
    spec = doc["spec"]
    run.workload = _label(doc["workload"])
    run.preset = _label(spec.get("preset"))
    comparability = doc.get("comparability") or {}
    run.preset_kind = comparability.get("preset_kind")
    run.comparable_to_paper = comparability.get("comparable_to_paper")
    run.comparability_reasons = list(comparability.get("reasons") or [])
    run.unit = _label(doc["throughput"]["unit"])
    run.work_unit = _label(doc["work"]["unit"])
    run.site = _label((spec.get("site") or {}).get("name"))
    host = doc.get("host") or {}
    run.host = _label(host.get("node") or host.get("hostname"))
    run.started = (doc.get("timestamps") or {}).get("started")
    config = doc.get("config") or {}
    run.device_type = config.get("device_type") or (spec.get("devices") or {}).get("type") or "?"
    used = [g for g in doc.get("gpus") or [] if g.get("used")]
    if run.device_type == "cuda" and used:
        names = list(dict.fromkeys(_label(g["name"]) for g in used))
        run.device_full = " + ".join(names)
        run.gpu_memory_bytes = used[0].get("memory_total_bytes")
        run.device = " + ".join(short_name(n) for n in names)
    else:
        run.device_full = _label(host.get("cpu_model") or "CPU")
        run.device = "CPU"
    run.processes = int(config.get("processes") or (spec.get("devices") or {}).get("nproc") or 1)
    if run.device_type == "cuda" and used:
        run.processes = len(used)
    run.nodes = int((spec.get("slurm") or {}).get("nodes") or 1)
    job = (spec.get("slurm") or {}).get("job_id")
    run.slurm_job = str(job) if job is not None else None
    _fill_limits(run, doc, spec, used)
    _fill_figures(run, doc, spec, used)
    _fill_context(run, path, doc, spec, used)
    _as_declared_floats(run)


def _as_declared_floats(run: Run) -> None:
    """A whole number where Run declares a float ("measured_units": 4) as that float,
    so the index holds it in its DOUBLE column (report/run_columns.py), queryable,
    not in the row's exceptions."""
    from hpcai.launcher.report.run_columns import float_fields

    for name in float_fields(Run):
        if type(getattr(run, name)) is int:
            setattr(run, name, float(getattr(run, name)))


def _fill_limits(run: Run, doc: dict, spec: dict, used: list) -> None:
    """The cap and clocks asked for, whether the cap held, the GPUs' default limit."""
    run.cap_w = spec["power"]["cap_w"]
    run.cap_read = True
    clocks = spec["power"].get("clocks") or {}
    run.sm_clock_cap_mhz, run.mem_clock_cap_mhz = clocks.get("sm_mhz"), clocks.get("mem_mhz")
    run.power_profile = spec["power"].get("profile")
    cap = (doc.get("power") or {}).get("cap") or {}
    run.enforced = cap.get("enforced") if run.cap_w is not None else None
    defaults = [(g.get("limits") or {}).get("default_w") for g in used]
    run.default_limit_w = defaults[0] if defaults and defaults[0] is not None else None


def _fill_figures(run: Run, doc: dict, spec: dict, used: list) -> None:
    """Throughput, power and energy, as the result states them."""
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
    run.node_energy_j = (power.get("node_power") or {}).get("node_energy_j")
    run.facility = dict(spec.get("facility") or {})
    run.power_doc = power
    run.serving_phases = (doc.get("workload_metrics") or {}).get("serving_phases")
    run.units = (doc.get("work") or {}).get("measured_units")
    run.achieved_tflops_node = tp.get("achieved_tflops_node")
    run.fraction_of_peak = tp.get("fraction_of_peak")


def _fill_context(run: Run, path: Path, doc: dict, spec: dict, used: list) -> None:
    """Precision, work per unit, clocks seen, samples, the measured window, the sweep."""
    config = doc.get("config") or {}
    run.precision = config.get("precision")
    run.flops_per_unit, run.bytes_per_unit = config.get("flops_per_unit"), config.get("bytes_per_unit")
    run.sm_clock_mhz = mean_of_known([g.get("sm_clock_mhz_mean") for g in used])
    run.memory_clock_mhz = mean_of_known([g.get("memory_clock_mhz_mean") for g in used])
    samples = (doc.get("sidecar") or {}).get("samples")
    if samples and (path.parent / samples).is_file():
        run.samples_path = os.fspath(path.parent / samples)
    stamps = doc.get("timestamps") or {}
    run.measured_start, run.measured_end = stamps.get("measured_start"), stamps.get("measured_end")
    sweep = spec.get("sweep") or {}
    run.sweep_id, run.repeat = sweep.get("id"), sweep.get("repeat")
    run.point = {str(n): v for n, v in sweep.get("point") or (spec.get("slurm") or {}).get("point") or []}
    run.input = doc.get("input")
    run.scaling = (spec.get("slurm") or {}).get("scaling")



# ---- the seed paper's figures ------------------------------------------------------
def load_reference(path: str | Path | None = None) -> list[RefPoint]:
    """The seed paper's figures (see report/reference.py, which reads them)."""
    from hpcai.launcher.report.reference import read_reference

    return read_reference(path)
