"""One benchmark run on this node: site, spec, cap, entrypoint, result.

Order matters for safety: everything that can be checked is checked before
the first limit changes, and the limits come back as soon as the workload
has exited, on every path.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.errors import Interrupted, UsageError, WorkloadError
from hpcai.launcher import output_check, results, runtime, sites
from hpcai.launcher.lifeline import Lifeline
from hpcai.launcher.workload_log import LogFollower
from hpcai.launcher.spec import build_spec
from hpcai.signals import install_signal_handlers
from hpcai.workloads.catalog import get_workload

CHILD_GRACE_S = 30  # after a forwarded signal, before the workload is killed
# Under Slurm the caps must be back before its SIGKILL, KillWait after the SIGTERM
# (30 s by default): the workload gets at most 20 s, and 10 s stay for the restore.
SLURM_CHILD_GRACE_S = 20
CAP_RESTORE_RESERVE_S = 10
ORPHAN_WAIT_S = 5  # then, caps restored, for workers that outlived torchrun


@dataclass
class Options:
    workload: str
    impl: str | None = None
    preset: str | None = None
    cap_w: float | None = None
    power_method: str | None = None
    site: str | None = None
    device: str = "auto"
    gpus: int | None = None
    nproc: int | None = None
    output: str | None = None
    dry_run: bool = False
    telemetry: bool = True
    params: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)
    journal: str | None = None
    # A sweep (several caps, or --repeat N) when caps is set; cap_w is then unused.
    caps: list | None = None
    repeat: int = 1
    seed: int | None = None
    order: str = "shuffle"
    idle_s: float = 5.0
    runtime: str = "auto"  # auto | host | apptainer
    image: str | None = None  # a SIF to run instead of the images folder's
    slurm: object = None  # SlurmOptions: submit as a batch job instead of running here
    # Clock caps (--sm-clock/--mem-clock), MHz per GPU; the lists make a sweep
    # (a grid with the caps), as caps does.
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clocks: list | None = None
    mem_clocks: list | None = None
    # --vary: [(param, [values])], a grid sweep (launcher/grid.py); --scaling with nodes.
    vary: list | None = None
    scaling: str | None = None
    in_run: bool | None = None  # sweeps: one process for every cap (None: where supported)

    @property
    def is_sweep(self) -> bool:
        return self.caps is not None or bool(self.vary)


def log(message: str) -> None:
    print(f"hpcai: {message}", file=sys.stderr, flush=True)


def check_output_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".hpcai-write-test-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {path} ({exc.strerror})",
                         "choose another with --output") from None
    return path


def preflight(site: dict, node: Node, opts: Options, folder: Path) -> None:
    """Everything that can refuse a run, checked before anything is measured or set."""
    if node.gpus:
        from hpcai.launcher.power.session import refuse_stale_journal

        # Uncapped runs too: GPUs left capped by a killed run would mislabel the result.
        refuse_stale_journal(journal_path(site, opts.journal))
    check_output_dir(folder)
    output_check.check_free_space(folder, output_check.min_free_mb(site))


def journal_path(site: dict, override: str | None) -> Path:
    from hpcai.launcher.power.journal import default_journal_path

    if override:
        return Path(override)
    if site["paths"].get("state_dir"):
        import socket

        return Path(site["paths"]["state_dir"]) / f"power-journal-{socket.gethostname()}.json"
    return default_journal_path()


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


def select_gpus(node: Node, requested: int | None) -> list[tuple]:
    """The first N GPUs this job may use, as (GpuInfo, workload id), in the
    order its inherited CUDA_/ROCR_VISIBLE_DEVICES gives (launcher/visibility.py)."""
    from hpcai.launcher.visibility import visible_gpus

    allowed = visible_gpus(node.gpus)
    count = requested if requested is not None else len(allowed)
    if count < 1:
        raise UsageError("--gpus must be at least 1", f"got {count}")
    if count > len(allowed):
        raise UsageError(f"--gpus {count} asked for, but this node has {len(allowed)} usable",
                         f"use --gpus {len(allowed)} or fewer")
    return allowed[:count]


def plan(opts: Options, placement: dict | None = None,
         run_id: str | None = None) -> tuple[dict, list[str], dict, Node]:
    """Everything decided and checked; nothing changed yet.

    Inside a Slurm job, `placement` is this node's place (launcher/slurm/node.py)
    and `run_id` the id all nodes share; the node writes `<run_id>/node-<K>/`.
    """
    site = sites.load(opts.site)
    workload = get_workload(opts.workload)
    impl = workload.impl(opts.impl)
    node = Node.detect(site["gpu"]["vendor"])
    device = opts.device
    if device == "auto":
        device = "cuda" if node.gpus else "cpu"
    if device == "cuda" and not node.gpus:
        raise UsageError("--device cuda asked for, but no GPU was found",
                         "check the driver (nvidia-smi / amd-smi), or use --device cpu")
    if opts.cap_w is not None and not node.gpus and not opts.dry_run:
        raise UsageError("--cap needs GPUs, and no GPU management library sees one here",
                         "drop --cap, or install nvidia-ml-py / amdsmi on a GPU node")
    clocks = clock_request(opts)
    if clocks and not node.gpus and not opts.dry_run:
        raise UsageError(f"{_clock_flags(clocks)} GPUs, and no GPU management library "
                         "sees one here", "drop them, or run as root on a GPU node with "
                         "nvidia-ml-py / amdsmi")
    preset = opts.preset or (workload.gpu_default_preset if device == "cuda"
                             else workload.cpu_default_preset)
    if device == "cuda":
        if opts.nproc is not None:
            raise UsageError("--nproc is for CPU runs", "use --gpus N to choose GPUs")
        picked = select_gpus(node, _preset_gpus(workload.preset(preset), node, opts.gpus))
        gpu_indices = [g.index for g, _ in picked]
        nproc = len(gpu_indices) if impl.process_model == "torchrun" else 1
    else:
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
        from hpcai.launcher.visibility import visible_gpus

        picked = visible_gpus(node.gpus)
        gpu_indices = [g.index for g, _ in picked] or None
    if opts.cap_w is not None and not gpu_indices and not opts.dry_run:
        raise UsageError("--cap needs GPUs, and none of this node's GPUs is visible to this job",
                         "check CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES, or drop --cap")
    if clocks and not gpu_indices and not opts.dry_run:
        raise UsageError(f"{_clock_flags(clocks)} GPUs, and none of this node's GPUs is "
                         "visible to this job", "check CUDA_VISIBLE_DEVICES / "
                         "ROCR_VISIBLE_DEVICES, or drop them")
    method = opts.power_method or site["power"]["method"]
    output = Path(opts.output or site["paths"]["results"]).absolute()
    chosen = runtime.select(opts.runtime, site, node.vendor, workload.image_family, opts.image, log)
    spec = build_spec(
        workload, preset, impl=opts.impl or workload.default_impl, overrides=opts.params,
        protocol_overrides={**opts.protocol, "telemetry": opts.telemetry},
        device_type=device, vendor=node.vendor, nproc=nproc, gpu_indices=gpu_indices,
        cap_w=opts.cap_w, power_method=method,
        cap_tolerance_frac=float(site["power"]["cap_tolerance_frac"]),
        node_overhead_w=float(site["power"]["node_overhead_w"]),
        site={"name": site["name"], "path": site["path"]},
        output_dir=str(output), runtime=chosen,
        gpu_name=_gpu_name(node, gpu_indices) if device == "cuda" else None,
    )
    spec["protocol"] = _window_protocol(spec)
    spec["node_power"] = site["node_power"]  # node sources the workload's sampler reads
    if clocks:  # clock caps, MHz per GPU (launcher/power/clocks.py sets and restores them)
        spec["power"]["clocks"] = clocks
        spec["run_id"] += "".join(f"-{name}{clocks[key]}MHz" for name, key in
                                  (("sm", "sm_mhz"), ("mem", "mem_mhz")) if clocks[key] is not None)
    spec["facility"] = site["facility"]  # PUE, carbon and price, for the report
    # GPUs by identity: the workload is handed these ids, its sampler keeps these UUIDs.
    spec["devices"]["gpu_uuids"] = [g.uuid for g, _ in picked] if gpu_indices else None
    spec["devices"]["visible_ids"] = [i for _, i in picked] if gpu_indices else None
    if run_id is not None:
        spec["run_id"] = run_id
    spec["output_dir"] = str(output / spec["run_id"])
    if placement is not None:
        spec["slurm"] = placement
        spec["output_dir"] = str(output / spec["run_id"] / f"node-{placement['node_rank']}")
    command = runtime.command(spec, site, str(Path(spec["output_dir"]) / "spec.json"))
    return spec, command, site, node


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


def check_clock_caps(spec: dict, node: Node, site: dict, sm_mhz: int | None,
                     mem_mhz: int | None) -> None:
    """Every GPU of the run supports the clocks; ClockSession checks again before setting."""
    if sm_mhz is None and mem_mhz is None:
        return
    from hpcai.launcher.power import make_backend
    from hpcai.launcher.power.clocks import check_clocks, controls_for

    with make_backend(spec["power"]["method"], node.vendor, site["power"]["command"]) as backend:
        indices = spec["devices"]["gpu_indices"] or []
        mig = [g.index for g in backend.gpus() if g.index in indices and g.mig_enabled]
        if mig:
            raise UsageError(f"clocks cannot be capped on a MIG slice: GPU {mig[0]} is in MIG mode",
                             "the clocks are the whole GPU's; drop --sm-clock/--mem-clock")
        check_clocks(controls_for(backend, indices), sm_mhz, mem_mhz)
def _window_protocol(spec: dict) -> dict:
    """Adaptive windows (--ci-target): their settings filled in and checked. An
    engine that cannot (SGLang serving: one load wave per window) measures the
    preset's fixed epochs: its spec says so."""
    from hpcai.launcher.inrun import adaptive_supported
    from hpcai.measure.adaptive import check_window_settings, resolve_protocol

    protocol = dict(spec["protocol"])
    if adaptive_supported(spec["workload"], spec["impl"]) is not None:
        protocol["ci_target"] = None
    protocol = resolve_protocol(protocol, spec["preset"])
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
    from hpcai.launcher.visibility import visible_gpus

    return min(preset.gpus, max(1, len(visible_gpus(node.gpus))))


def _gpu_name(node: Node, indices: list[int]) -> str | None:
    names = [g.name for g in node.gpus if g.index in indices]
    return names[0] if names else None


def caps_unchecked_note(spec: dict) -> str:
    """A dry run on a machine without GPUs (a login node) still shows the plan."""
    return (f"note: no GPU is visible here, so the cap(s) were not checked; they are checked "
            f"against each GPU's limits where the run happens, which refuses a cap out of range. "
            f"This plan is this machine's (device {spec['devices']['type']}, preset "
            f"{spec['preset']}); on a GPU node the device and the default preset follow its GPUs")


def check_cap(backend, cap_w: float, indices: list[int], site: dict) -> None:
    """The site's allowed range, then each GPU's; CapSession checks again before setting."""
    from hpcai.errors import CapOutOfRangeError
    from hpcai.launcher.power.session import check_cap_range

    mig = [g.index for g in backend.gpus() if g.index in indices and g.mig_enabled]
    if mig:
        raise UsageError(f"--cap cannot be set on a MIG slice: GPU {mig[0]} is in MIG mode",
                         "NVML limits the whole GPU, shared by every MIG instance; drop --cap, "
                         "or run on a GPU with MIG disabled")
    allowed = site["power"].get("allowed_cap_range_w")
    if allowed and not allowed[0] <= cap_w <= allowed[1]:
        raise CapOutOfRangeError(
            f"cap {cap_w:g} W is outside this site's allowed range {allowed[0]:g}-{allowed[1]:g} W",
            "choose a cap inside it, or ask the site admins")
    check_cap_range(cap_w, {i: backend.limits(i) for i in indices})


def launch(opts: Options, placement: dict | None = None, run_id: str | None = None) -> int:
    # A generic option the workload would ignore is refused before anything is submitted or set.
    get_workload(opts.workload).refuse_unhonoured(opts.impl, opts.params)
    if opts.slurm is not None:
        from hpcai.launcher.slurm.submit import submit

        return submit(opts, opts.slurm)
    if opts.is_sweep:
        from hpcai.launcher.sweep import run_sweep

        return run_sweep(opts)
    spec, command, site, node = plan(opts, placement, run_id)
    if opts.protocol.get("ci_target") not in (None, "off") and \
            spec["protocol"].get("ci_target") is None:
        log(f"note: {spec['workload']} measures the preset's fixed protocol (serving: one "
            "load of --steps-per-epoch requests); --ci-target applies to the training workloads")
    if opts.cap_w is not None and not node.gpus:  # only a dry run gets here (plan refuses)
        log(caps_unchecked_note(spec))
    elif opts.cap_w is not None:
        from hpcai.launcher.power import make_backend

        with make_backend(spec["power"]["method"], node.vendor, site["power"]["command"]) as backend:
            check_cap(backend, opts.cap_w, spec["devices"]["gpu_indices"], site)
    clocks = spec["power"].get("clocks")
    if clocks and not node.gpus:  # a dry run without GPUs: shown, not checked
        log("note: no GPU is visible here, so the clock caps were not checked; they are "
            "checked against each GPU's supported clocks where the run happens")
    elif clocks:
        check_clock_caps(spec, node, site, clocks["sm_mhz"], clocks["mem_mhz"])
    if opts.dry_run:
        print(json.dumps(spec, indent=2))
        print("command: " + shlex.join(command))
        return 0
    preflight(site, node, opts, Path(spec["output_dir"]).parent)
    runtime.check_ready(spec, get_workload(spec["workload"]).impl(spec["impl"]).framework)
    return execute(spec, command, site, node, opts)


def execute(spec: dict, command: list[str], site: dict, node: Node, opts: Options) -> int:
    from hpcai.launcher.power import CapSession, make_backend
    from hpcai.launcher.power.clocks import ClockSession

    run_dir = Path(spec["output_dir"])
    cap_w = spec["power"]["cap_w"]
    clocks = spec["power"].get("clocks") or {}
    clock_session = None
    indices = spec["devices"]["gpu_indices"] or []
    backend = make_backend(spec["power"]["method"], node.vendor, site["power"]["command"]) \
        if node.gpus else None
    env = runtime.environment(spec, site)
    child = None
    interrupted: Interrupted | None = None
    limits: dict[int, dict] = {}
    end_limits: dict[int, float | None] = {}

    signals = ChildSignals(spec)

    with contextlib.ExitStack() as stack:
        stack.enter_context(install_signal_handlers(signals.forward))
        if backend is not None:
            stack.callback(backend.close)
            # Entered last, so it exits first: limits come back before anything else.
            session = stack.enter_context(
                CapSession(backend, cap_w, indices, journal_path(site, opts.journal)))
            limits = session.gpus
            if cap_w is not None:
                log(f"power limit set to {cap_w:g} W on GPU(s) {', '.join(map(str, indices))};"
                    " it is restored when the run ends")
            if clocks:
                # Entered after the cap, so restored before it.
                clock_session = stack.enter_context(ClockSession(
                    backend, clocks.get("sm_mhz"), clocks.get("mem_mhz"), indices,
                    journal_path(site, opts.journal)))
                from hpcai.launcher.sweep import clock_label

                log(f"clocks capped ({clock_label(clocks.get('sm_mhz'), clocks.get('mem_mhz'))}) "
                    f"on GPU(s) {', '.join(map(str, indices))}; restored when the run ends")
        # Only now, with the cap in place, does the run leave anything on disk:
        # the folder, its spec and a `running` result that any ending will mark.
        output_check.first_write(run_dir, spec, placeholder_result(spec, run_dir))
        # Held until the workload has exited: if this launcher dies, the workload stops.
        lifeline = stack.enter_context(Lifeline(run_dir, spec["run_id"]))
        if lifeline.problem:
            log(f"no lifeline for the workload ({lifeline.problem}); "
                "if this launcher is killed, stop the workload by hand")
        env.update(lifeline.environment(container=spec["runtime"]["kind"] == "apptainer"))
        follower = LogFollower(run_dir)
        stack.callback(follower.stop)
        try:
            # A signal from here on marks the `running` result interrupted.
            devices = spec["devices"]
            log(f"run {spec['run_id']}: {spec['workload']} preset {spec['preset']} on "
                f"{devices['nproc']} {'GPU' if devices['type'] == 'cuda' else 'CPU process'}(es); "
                f"results in {run_dir}")
            if spec["runtime"]["kind"] == "apptainer":
                image = spec["runtime"]["image"]
                log(f"runtime: apptainer, image {image['path']} (sha256 {image['sha256'][:12]})")
            # Its own session: a terminal's Ctrl-C reaches the launcher alone, which
            # forwards it once, instead of hitting torchrun and its workers twice.
            child = signals.child = _start(command, env, follower, run_dir)
            follower.start()
            if cap_w is not None:
                from hpcai.launcher.power.journal import record_workload

                record_workload(journal_path(site, opts.journal), child.pid, spec["run_id"])
            if clock_session is not None:
                from hpcai.launcher.power.clocks import record_clock_workload

                record_clock_workload(journal_path(site, opts.journal), child.pid, spec["run_id"])
            child.wait()
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
            signals.stop(interrupted.signum)
        # Before the limits come back: what was in force when the workload ended.
        end_limits = limits_in_force(backend, indices)
    if cap_w is not None and backend is not None:
        log("power limits restored")
    if clock_session is not None:
        log("clocks restored")
    code = child.returncode if child is not None else None
    if interrupted is not None and signals.under_slurm:
        _await_final_result(run_dir / "result.json", ORPHAN_WAIT_S)
    try:
        doc = _finish_result(run_dir, spec, code, limits, end_limits, interrupted,
                             clock_session)
    except WorkloadError:
        if interrupted is not None:  # stopped before it could write a result
            raise interrupted from None
        raise
    if interrupted is not None:
        raise interrupted
    return _summarize(doc, run_dir)


def placeholder_result(spec: dict, run_dir: Path) -> dict:
    """The result as it stands before the workload starts: `running`, no figures."""
    from hpcai.workloads.entrypoint import Run
    from hpcai.workloads.result import clean

    return clean(Run(spec, run_dir)._document())


def limits_in_force(backend, indices: list[int]) -> dict[int, float | None]:
    """Each GPU's enforced limit now (the set one where the driver reports no other)."""
    found: dict[int, float | None] = {}
    if backend is None:
        return found
    for i in indices:
        try:
            lim = backend.limits(i)
            found[i] = lim.enforced_w if lim.enforced_w is not None else lim.current_w
        except Exception:  # a reading must not stop the limits coming back
            found[i] = None
    return found


def _start(command: list[str], env: dict, follower: LogFollower, run_dir: Path):
    """The workload, its output into the run's log (never a pipe it could die of)."""
    try:
        with follower.open_for_workload() as sink:
            return subprocess.Popen(command, env=env, start_new_session=True,
                                    stdout=sink, stderr=sink)
    except OSError as exc:
        raise output_check.write_error(run_dir, exc, "the workload's log",
                                       "free space or make the folder writable") from None


class ChildSignals:
    """A signal to the launcher while its workload runs: forwarded to the workload
    exactly once (torchrun abandons its workers' clean-up on a second one), and
    under Slurm only noted: Slurm signals every process of the step itself
    (scancel, time limit), so forwarding would make it a second signal."""

    def __init__(self, spec: dict):
        self.under_slurm = "slurm" in spec
        self.grace_s = slurm_grace_s(spec["slurm"].get("kill_wait_s")) if self.under_slurm \
            else CHILD_GRACE_S
        self.child: subprocess.Popen | None = None
        self.forwarded: list[int] = []

    def forward(self, signum: int) -> None:
        if self.under_slurm:
            self.forwarded.append(signum)
        elif self.child is not None and self.child.poll() is None and not self.forwarded:
            self.child.send_signal(signum)
            self.forwarded.append(signum)

    def stop(self, signum: int, already_sent: bool | None = None) -> None:
        """Stop the workload (if started): the signal unless already sent, then,
        after the grace time, SIGKILL to its whole process group."""
        if self.child is not None:
            _stop_child(self.child, signum, bool(self.forwarded) if already_sent is None
                        else already_sent, grace_s=self.grace_s)


def slurm_grace_s(kill_wait_s: int | None) -> float:
    """The workload's time to stop after Slurm's SIGTERM, leaving the cap restore
    its reserve before Slurm's SIGKILL (a site's KillWait may be short)."""
    if kill_wait_s is None:
        return SLURM_CHILD_GRACE_S
    return max(1.0, min(SLURM_CHILD_GRACE_S, kill_wait_s - CAP_RESTORE_RESERVE_S))


def _stop_child(child: subprocess.Popen, signum: int, already_sent: bool,
                grace_s: float = CHILD_GRACE_S) -> None:
    """Give the workload time to write its partial result, then kill it.

    Further signals meanwhile must not cut this short: the caps are
    restored only after the workload has stopped using the GPUs.
    """
    if child.poll() is None and not already_sent:
        child.send_signal(signum)
    deadline = time.monotonic() + grace_s
    while child.poll() is None:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)  # torchrun and every worker it started
        except (Interrupted, KeyboardInterrupt):
            continue


def _await_final_result(path: Path, seconds: float) -> None:
    """Under Slurm, torchrun may die of the second SIGTERM (srun forwards one
    after Slurm's own) while its workers are still writing the result."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text()).get("status") != "running":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)


def _finish_result(run_dir: Path, spec: dict, code: int | None, limits: dict,
                   end_limits: dict | None = None, interrupted: Interrupted | None = None,
                   clock_session=None) -> dict:
    from hpcai.measure import validity
    from hpcai.workloads.result import clean, write_json_atomic

    path = run_dir / "result.json"
    doc = results.load(path)
    if doc is None:
        raise WorkloadError(f"the workload exited with code {code} and wrote no result",
                            f"see {run_dir / 'workload.log'}; the run spec is "
                            f"{run_dir / 'spec.json'}")
    if doc["status"] == "running":
        if interrupted is not None:
            results.mark_interrupted(doc, interrupted.one_line())
        else:
            results.mark_crashed(doc, code)
    results.apply_limits(doc, limits, spec["power"]["cap_w"],
                         float(spec["power"]["cap_tolerance_frac"]))
    if clock_session is not None:
        from hpcai.launcher.power.clocks import clocks_record

        doc["power"]["clocks"] = clocks_record(clock_session, measured_clocks(doc))
    doc["launcher"] = {"command_exit_code": code,
                       "gpu_limits": results.limits_record(limits, end_limits or {})}
    idle = results.sweep_idle_baseline(run_dir, spec)
    if idle is not None:
        doc["launcher"]["idle_baseline"] = idle
    # Again, now that the enforced limits and the idle baseline are in.
    doc["validity"] = validity.evaluate(doc, "launcher")
    doc = clean(doc)
    try:
        write_json_atomic(path, doc)
    except OSError as exc:
        if doc["status"] != "complete" and output_check.overwrite_in_place(path, doc):
            raise output_check.write_error(
                run_dir, exc, "the result's full form",
                f"{path} is marked {doc['status']} (written compactly in place)") from None
        raise output_check.write_error(
            run_dir, exc, "the result",
            f"{path} is left as the workload wrote it (status {doc_status(path)}), "
            "without the launcher's checks: the report will not count it") from None
    results.validate(doc, path)
    return doc


def measured_clocks(doc: dict) -> dict[int, dict]:
    """Per used GPU, the mean SM and memory clock the sampler saw, MHz."""
    return {g["index"]: {"sm": g.get("sm_clock_mhz_mean"), "mem": g.get("memory_clock_mhz_mean")}
            for g in doc.get("gpus") or [] if g.get("used")}


def doc_status(path: Path) -> str:
    try:
        return str(json.loads(path.read_text()).get("status"))
    except (OSError, ValueError, AttributeError):
        return "missing"


def _summarize(doc: dict, run_dir: Path) -> int:
    path = run_dir / "result.json"
    if doc["status"] != "complete":
        message = (doc.get("error") or {}).get("message", "no error recorded")
        raise WorkloadError(f"run {doc['status']}: {message}",
                            f"partial result (not complete) at {path}; the workload's "
                            f"output is in {run_dir / 'workload.log'}")
    tp, power = doc["throughput"], doc["power"]
    unit = doc["work"]["unit"]
    parts = [f"{tp['node']:.1f} {tp['unit']} (node)",
             f"{tp['per_gpu']:.1f} per {'GPU' if doc['config'].get('device_type') == 'cuda' else 'process'}"]
    if power["available"]:
        parts.append(f"mean power {power['mean_power_w']:.0f} W (node)")
        parts.append(f"{power['energy_per_unit_j']:.3g} J/{unit[:-1]}")
    else:
        parts.append("power not measured")
    cap = power.get("cap") or {}
    if cap.get("requested_w") is not None and cap.get("enforced") is False:
        parts.append(f"cap {cap['requested_w']:g} W NOT enforced")
    print(f"{doc['workload']} {doc['spec']['preset']}: " + ", ".join(parts) + f"; result: {path}")
    for note in summary_notes(doc):
        print(f"note: {note}")
    return 0


# The report's default --noisy-cv: epochs varying more than this flag a figure.
NOISY_CV = 0.05
# Less measured time than this is a check that the pipeline works, not a figure to compare.
STEADY_MEASURED_S = 60.0


def summary_notes(doc: dict) -> list[str]:
    """What the headline figure cannot tell by itself: it was noisy, or too short."""
    notes = []
    from hpcai.measure.validity import describe, failed_checks

    failed = failed_checks(doc.get("validity"))
    if failed:
        notes.append(f"validity check(s) failed: {'; '.join(describe(c) for c in failed)}; the "
                     "report leaves this result out (`hpcai-launch check` shows every check)")
    stats = doc["throughput"].get("stats_node") or {}
    cv, n = stats.get("cv"), stats.get("epochs") or 0
    if cv is not None and cv > NOISY_CV:
        notes.append(f"noisy: the {n} measured epochs varied by {cv:.0%} (coefficient of "
                     f"variation, above {NOISY_CV:.0%}); repeat the run (--repeat 3) or measure "
                     "longer (--epochs, --steps-per-epoch) before comparing it")
    seconds = (doc.get("work") or {}).get("measured_seconds") or 0.0
    if seconds < STEADY_MEASURED_S:
        notes.append(f"a smoke test: {n} measured epoch(s) in {seconds:.0f} s (preset "
                     f"{doc['spec']['preset']}) check that the benchmark runs here; a figure to "
                     f"compare needs at least {STEADY_MEASURED_S:.0f} s of measurement (the "
                     "paper preset on GPUs)")
    return notes
