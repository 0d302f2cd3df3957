"""One run planned: Options in, a RunPlan out (spec, command, site, node, journal),
with every limit it will set checked once, before anything is set.

Every launch mode (single run, sweep, in-run sweep, a Slurm node) plans here;
nothing here changes a limit or writes a result.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.errors import CapOutOfRangeError, UsageError
from hpcai.launcher.run import output_check
from hpcai.launcher.run import runtime
from hpcai.launcher.site import config as sites
from hpcai.launcher.run.options import Options, log
from hpcai.launcher.run.spec import build_spec
from hpcai.spec import RunSpec
from hpcai.workloads import catalog
from hpcai.workloads.catalog import get_workload


@dataclass
class Node:
    """The GPUs this launcher can see, through the vendor's library."""

    vendor: str | None
    gpus: list  # GpuInfo
    inaccessible: list = field(default_factory=list)  # [{"index", "reason"}]: another job's, lost

    @classmethod
    def detect(cls, vendor: str) -> "Node":
        from hpcai.gpu import open_library

        library = open_library(vendor)
        if library is None:
            return cls(None, [])
        with library:
            gpus = [d.info() for d in library.devices()]
            return cls(library.vendor, gpus, list(getattr(library, "inaccessible", [])))


@dataclass
class RunPlan:
    """Everything decided and checked for one workload process; nothing changed yet."""

    spec: RunSpec
    command: list[str]
    site: dict
    node: Node
    journal: Path  # the power journal its cap and clock sessions write
    wait_for_gpus_s: float = 0.0  # --wait-for-gpus: queue behind a run holding its GPUs

    @property
    def indices(self) -> list[int]:
        return list(self.spec.devices.gpu_indices or [])

    def backend(self):
        """The power backend for this plan's GPUs (a context manager)."""
        from hpcai.launcher.power import make_backend

        return make_backend(self.spec.power.method, self.node.vendor,
                            self.site["power"]["command"])


def make_plan(opts: Options, placement: dict | None = None,
              run_id: str | None = None) -> RunPlan:
    """Inside a Slurm job, `placement` is this node's place (launcher/slurm/node.py)
    and `run_id` the id all nodes share; the node writes `<run_id>/node-<K>/`."""
    site = sites.load(opts.site)
    workload = get_workload(opts.workload)
    node = Node.detect(site["gpu"]["vendor"])
    device = _device(opts, node)
    preset = opts.preset or (workload.gpu_default_preset if device == "cuda"
                             else workload.cpu_default_preset)
    picked, nproc = _processes(opts, workload, preset, device, node)
    gpu_indices = [g.index for g, _ in picked] or None
    _refuse_limits_without_gpus(
        opts, gpu_indices, "none of this node's GPUs is visible to this job",
        "check CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, or drop --cap",
        "check CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, or drop them")
    output = Path(opts.output or site["paths"]["results"]).absolute()
    spec = build_spec(
        workload, preset, impl=opts.impl or workload.default_impl, overrides=opts.params,
        protocol_overrides={**opts.protocol, "telemetry": opts.telemetry},
        device_type=device, vendor=node.vendor, nproc=nproc, gpu_indices=gpu_indices,
        cap_w=opts.cap_w, power_method=opts.power_method or site["power"]["method"],
        cap_tolerance_frac=float(site["power"]["cap_tolerance_frac"]),
        node_overhead_w=float(site["power"]["node_overhead_w"]),
        site={"name": site["name"], "path": site["path"]}, output_dir=str(output),
        runtime=runtime.select(opts.runtime, site, node.vendor, workload.image_family,
                               opts.image, log,
                               plugin=workload.name if workload.name in catalog.PLUGINS else None),
        **(_gpu_model(node, gpu_indices) if device == "cuda" else {}),
    )
    spec = _complete_spec(spec, site, opts, picked if gpu_indices else None)
    spec = _place(spec, output, placement, run_id)
    command = runtime.command(spec, site, str(Path(spec.output_dir) / "spec.json"))
    wait = float(opts.wait_for_gpus_s or 0.0)
    if not math.isfinite(wait) or wait < 0:
        raise UsageError(f"--wait-for-gpus {wait:g} is not a number of seconds",
                         "give 0 (refuse a held GPU at once) or a positive number of seconds")
    return RunPlan(spec, command, site, node, journal_path(site, opts.journal),
                   wait_for_gpus_s=wait)


def _device(opts: Options, node: Node) -> str:
    """cuda or cpu; a limit asked for on a node without GPUs is refused here."""
    device = opts.device
    if device == "auto":
        device = "cuda" if node.gpus else "cpu"
    if device == "cuda" and not node.gpus:
        raise UsageError("--device cuda asked for, but no GPU was found",
                         "check the driver (nvidia-smi / amd-smi), or use --device cpu")
    if not node.gpus:
        _refuse_limits_without_gpus(
            opts, None, "no GPU management library sees one here",
            "drop --cap, or install nvidia-ml-py / amdsmi on a GPU node",
            "drop them, or run as root on a GPU node with nvidia-ml-py / amdsmi")
    return device


def _refuse_limits_without_gpus(opts: Options, gpu_indices, why: str, cap_fix: str,
                                clock_fix: str) -> None:
    if gpu_indices or opts.dry_run:
        return
    if opts.cap_w is not None:
        raise UsageError(f"--cap needs GPUs, and {why}", cap_fix)
    clocks = clock_request(opts)
    if clocks:
        raise UsageError(f"{_clock_flags(clocks)} GPUs, and {why}", clock_fix)
    if opts.power_profile is not None:
        raise UsageError(f"--power-profile needs GPUs, and {why}", clock_fix)


def _processes(opts: Options, workload, preset: str, device: str,
               node: Node) -> tuple[list[tuple], int]:
    """The GPUs the run uses, as (GpuInfo, workload id), and its process count."""
    from hpcai.launcher.run.visibility import visible_gpus

    impl = workload.impl(opts.impl)
    if device == "cuda":
        if opts.nproc is not None:
            raise UsageError("--nproc is for CPU runs", "use --gpus N to choose GPUs")
        picked = select_gpus(node, _preset_gpus(workload.preset(preset), node, opts.gpus))
        return picked, len(picked) if impl.process_model == "torchrun" else 1
    if opts.gpus is not None:
        raise UsageError("--gpus needs GPUs, and this run is on the CPU",
                         "use --nproc N to choose the number of CPU processes")
    nproc = opts.nproc if opts.nproc is not None else 2  # exercises the same DDP path
    if nproc < 1:
        raise UsageError("--nproc must be at least 1", f"got {nproc}")
    if impl.process_model != "torchrun":
        if opts.nproc not in (None, 1):
            raise UsageError(f"{workload.name} ({opts.impl or workload.default_impl}) "
                             "runs as one process", "drop --nproc")
        nproc = 1
    # Telemetry and caps still cover the node's GPUs, if it has any.
    return visible_gpus(node.gpus), nproc


def _complete_spec(spec: RunSpec, site: dict, opts: Options, picked: list | None) -> RunSpec:
    """What build_spec leaves to the launcher: windows, node power, clocks, GPU ids."""
    spec = spec.with_protocol(_window_protocol(spec))
    clocks = clock_request(opts)
    if clocks:  # clock caps, MHz per GPU (launcher/power/clocks.py sets and restores them)
        spec = spec.with_clocks(clocks).placed(run_id=spec.run_id + "".join(
            f"-{name}{clocks[key]}MHz" for name, key in (("sm", "sm_mhz"), ("mem", "mem_mhz"))
            if clocks[key] is not None))
    if opts.power_profile is not None:  # launcher/power/profiles.py requests and restores it
        spec = spec.with_profile(opts.power_profile).placed(
            run_id=f"{spec.run_id}-profile-{opts.power_profile}")
    # Node sources the workload's sampler reads; PUE, carbon and price, for the report.
    spec = spec.at_site(site["node_power"], site["facility"])
    # GPUs by identity: the workload is handed these ids, its sampler keeps these UUIDs.
    return spec.on_gpus([g.uuid for g, _ in picked] if picked else None,
                        [i for _, i in picked] if picked else None)


def _place(spec: RunSpec, output: Path, placement: dict | None, run_id: str | None) -> RunSpec:
    run_id = spec.run_id if run_id is None else run_id
    if placement is None:
        return spec.placed(run_id=run_id, output_dir=str(output / run_id))
    return spec.placed(run_id=run_id, output_dir=str(output / run_id / f"node-{placement['node_rank']}")
                       ).on_node(placement)


def select_gpus(node: Node, requested: int | None) -> list[tuple]:
    """The first N GPUs this job may use, as (GpuInfo, workload id), in the
    order its inherited CUDA_/ROCR_VISIBLE_DEVICES gives (launcher/run/visibility.py)."""
    from hpcai.launcher.run.visibility import visible_gpus

    allowed = visible_gpus(node.gpus)
    count = requested if requested is not None else len(allowed)
    if count < 1:
        raise UsageError("--gpus must be at least 1", f"got {count}")
    if count > len(allowed):
        raise UsageError(f"--gpus {count} asked for, but this node has {len(allowed)} usable",
                         f"use --gpus {len(allowed)} or fewer")
    return allowed[:count]


def clock_request(opts: Options) -> dict | None:
    """{"sm_mhz", "mem_mhz"} of a plain run's clock caps; None without any."""
    if opts.sm_clock_mhz is None and opts.mem_clock_mhz is None:
        return None
    return {"sm_mhz": opts.sm_clock_mhz, "mem_mhz": opts.mem_clock_mhz}


def _clock_flags(clocks: dict) -> str:
    """"--sm-clock needs", "--sm-clock and --mem-clock need": the subject of an error."""
    flags = [flag for flag, key in (("--sm-clock", "sm_mhz"), ("--mem-clock", "mem_mhz"))
             if clocks.get(key) is not None]
    return " and ".join(flags) + (" needs" if len(flags) == 1 else " need")


def clock_label(sm_mhz: int | None, mem_mhz: int | None) -> str:
    """"SM 1410 MHz, memory 2619 MHz"; "" without clock caps."""
    parts = [f"{name} {mhz} MHz" for name, mhz in (("SM", sm_mhz), ("memory", mem_mhz))
             if mhz is not None]
    return ", ".join(parts)


def _window_protocol(spec: RunSpec) -> dict:
    """Adaptive windows (--ci-target): their settings filled in and checked. An
    engine that cannot (SGLang serving: one load wave per window) measures the
    preset's fixed epochs: its spec says so."""
    from hpcai.launcher.sweep.inrun_support import adaptive_supported
    from hpcai.measure.adaptive import check_window_settings, resolve_protocol

    protocol = spec.protocol.to_json()
    if adaptive_supported(spec.workload, spec.impl) is not None:
        protocol["ci_target"] = None
    protocol = resolve_protocol(protocol, catalog.preset_windows(spec.workload, spec.preset))
    problem = check_window_settings(protocol)
    if problem is not None:
        what, fix = problem.split(": ", 1)
        raise UsageError(what, fix)
    return protocol


def _preset_gpus(preset, node: Node, requested: int | None) -> int | None:
    """--gpus, else the preset's GPUs per run (the paper's: 1 for vision, 4 for
    LLMs) as far as this node has them; None: all."""
    if requested is not None or preset.gpus is None:
        return requested
    from hpcai.launcher.run.visibility import visible_gpus

    return min(preset.gpus, max(1, len(visible_gpus(node.gpus))))


def _gpu_model(node: Node, indices: list[int] | None) -> dict:
    """The first run GPU's name and memory: what a preset's per-GPU settings match."""
    first = next((g for g in node.gpus if g.index in (indices or [])), None)
    if first is None:
        return {}
    return {"gpu_name": first.name, "gpu_memory_bytes": first.memory_total_bytes or None}


# ---- limits: every cap and clock checked once, before the first is set ---------------
def outside_site_range(cap_w: float, site: dict) -> str | None:
    """The site's rule for caps (power.allowed_cap_range_w): why this cap breaks it,
    or None. The login node (Slurm submit) and every GPU node apply this one rule."""
    allowed = site["power"].get("allowed_cap_range_w")
    if allowed and not allowed[0] <= cap_w <= allowed[1]:
        return (f"cap {cap_w:g} W is outside this site's allowed range "
                f"{allowed[0]:g}-{allowed[1]:g} W")
    return None


def check_limits(run: RunPlan, caps: list, clocks: list[tuple] = (),
                 indices: list[int] | None = None, profiles: list = ()) -> None:
    """Every cap (W), (SM, memory) clock pair and power profile the run will set,
    against the site's range and each GPU's; the sessions check again before
    setting. Without GPUs (a dry run on a login node) the plan is shown with a note instead."""
    caps = [c for c in caps if c is not None]
    clocks = [(sm, mem) for sm, mem in clocks if sm is not None or mem is not None]
    profiles = [p for p in profiles if p is not None]
    if not run.node.gpus:
        if caps:
            log(caps_unchecked_note(run.spec))
        if clocks or profiles:
            what = " and ".join(w for w, given in (("the clock caps", clocks), ("the power profiles", profiles)) if given)
            log(f"note: no GPU is visible here, so {what} were not "
                "checked; they are checked against each GPU where the run happens")
        return
    if not caps and not clocks and not profiles:
        return
    indices = run.indices if indices is None else indices
    with run.backend() as backend:
        for cap in caps:
            _check_cap(backend, cap, indices, run.site)
        for sm, mem in clocks:
            _check_clocks(backend, indices, sm, mem)
        for name in profiles:
            _check_profile(backend, indices, name)


def _check_cap(backend, cap_w: float, indices: list[int], site: dict) -> None:
    from hpcai.launcher.power.session import check_cap_range

    mig = [g.index for g in backend.gpus() if g.index in indices and g.mig_enabled]
    if mig:
        raise UsageError(f"--cap cannot be set on a MIG slice: GPU {mig[0]} is in MIG mode",
                         "NVML limits the whole GPU, shared by every MIG instance; drop --cap, "
                         "or run on a GPU with MIG disabled")
    problem = outside_site_range(cap_w, site)
    if problem:
        raise CapOutOfRangeError(problem, "choose a cap inside it, or ask the site admins")
    check_cap_range(cap_w, {i: backend.limits(i) for i in indices})


def _check_clocks(backend, indices: list[int], sm_mhz: int | None, mem_mhz: int | None) -> None:
    from hpcai.launcher.power.clocks import check_clocks, controls_for

    mig = [g.index for g in backend.gpus() if g.index in indices and g.mig_enabled]
    if mig:
        raise UsageError(f"clocks cannot be capped on a MIG slice: GPU {mig[0]} is in MIG mode",
                         "the clocks are the whole GPU's; drop --sm-clock/--mem-clock")
    check_clocks(controls_for(backend, indices), sm_mhz, mem_mhz)


def _check_profile(backend, indices: list[int], name: str) -> None:
    from hpcai.launcher.power.profiles import check_profile, profile_controls

    mig = [g.index for g in backend.gpus() if g.index in indices and g.mig_enabled]
    if mig:
        raise UsageError(f"a power profile cannot be set on a MIG slice: GPU {mig[0]} is in MIG mode",
                         "the profile is the whole GPU's; drop --power-profile")
    check_profile(profile_controls(backend, indices), name)


def caps_unchecked_note(spec: RunSpec) -> str:
    """A dry run on a machine without GPUs (a login node) still shows the plan."""
    return (f"note: no GPU is visible here, so the cap(s) were not checked; they are checked "
            f"against each GPU's limits where the run happens, which refuses a cap out of range. "
            f"This plan is this machine's (device {spec.devices.type}, preset "
            f"{spec.preset}); on a GPU node the device and the default preset follow its GPUs")


# ---- preflight: what can refuse a run, before anything is measured or set -------------
def preflight(run: RunPlan, folder: Path) -> None:
    if run.node.gpus:
        from hpcai.launcher.power.session import refuse_stale_journal

        # Uncapped runs too: GPUs left capped by a killed run would mislabel the result.
        refuse_stale_journal(run.journal)
    check_output_dir(folder)
    output_check.check_free_space(folder, output_check.min_free_mb(run.site))
    spec = run.spec
    runtime.check_ready(spec, get_workload(spec.workload).impl(spec.impl).framework)


def check_output_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".hpcai-write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {path} ({exc.strerror})",
                         "choose another with --output") from None
    return path


def journal_path(site: dict, override: str | None) -> Path:
    from hpcai.launcher.power.journal import default_journal_path

    if override:
        return Path(override)
    if site["paths"].get("state_dir"):
        import socket

        return Path(site["paths"]["state_dir"]) / f"power-journal-{socket.gethostname()}.json"
    return default_journal_path()
