"""In-run cap sweeps, the launcher's side: one workload process measures one
segment per cap and repeat; this launcher sets each segment's cap when the
workload asks for it over the control channel (workloads/control.py).

The process warms up once under the first cap, which CapSession sets exactly
as for a single run (snapshot, journal, read-back). At each segment boundary
the workload's node leader asks for segment K; the launcher first checks and
files segment K-1's result (its limits read while its cap is still in force),
then changes the cap inside the same CapSession (the snapshot and journal stay
the pre-sweep ones, so a signal or a crash restores those) and answers with the
enforced limits. Every segment is a run folder of the sweep with its own
schema-valid result.json, so resume and `hpcai-launch report` work as for one
run per cap.
"""
from __future__ import annotations

import contextlib
import copy
import signal
import time
from pathlib import Path

from hpcai.errors import HpcaiError, Interrupted, ResultError, UsageError
from hpcai.signals import install_signal_handlers
from hpcai.workloads import control
from hpcai.workloads.inrun import IN_RUN_MODULES

POLL_S = 0.05


def supported(workload_name: str, impl: str | None) -> str | None:
    """None when the workload measures in-run, else why not (one line)."""
    from hpcai.workloads.catalog import get_workload

    workload = get_workload(workload_name)
    chosen = workload.impl(impl)
    if chosen.module in IN_RUN_MODULES:
        return None
    return (f"{workload_name} ({impl or workload.default_impl}) cannot measure in-run yet: "
            "one run per cap, each with the preset's fixed epochs")


def adaptive_supported(workload_name: str, impl: str | None) -> str | None:
    """None when the workload can measure an adaptive window (--ci-target), else why
    not: SGLang serving measures in-run too, but each window is one load wave."""
    from hpcai.workloads.catalog import get_workload
    from hpcai.workloads.inrun import WAVE_MODULES

    why = supported(workload_name, impl)
    if why is None and get_workload(workload_name).impl(impl).module in WAVE_MODULES:
        return f"{workload_name} measures one load wave per window"
    return why


def check_request(in_run: bool | None, caps: list | None, other_axes: str | None = None) -> None:
    """--in-run needs two caps or more, and nothing else varied or fixed (clock caps,
    a --vary grid: one process per slot): a one-line error otherwise."""
    distinct = {c for c in (caps or []) if c is not None}
    if in_run and len(distinct) < 2:
        raise UsageError("--in-run needs a sweep of two caps or more",
                         "give --cap LIST or START:STOP:STEP, or drop --in-run")
    if in_run and other_axes:
        raise UsageError(f"--in-run changes only the power cap, and this sweep has {other_axes}",
                         "drop --in-run (each slot then runs as its own process)")


def choose(opts, log, other_axes: str | None = None) -> bool:
    """Whether this sweep runs in-run: the default where the workload can."""
    distinct = {c for c in (opts.caps or []) if c is not None}
    if opts.in_run is False or len(distinct) < 2:
        return False
    if other_axes:
        log(f"this sweep has {other_axes}: one process per slot (in-run sweeps change only "
            "the cap)")
        return False
    why = supported(opts.workload, opts.impl)
    if why is not None:
        log(why)
        return False
    return True


# ---- the segments -------------------------------------------------------------
class Segments:
    """The launcher's end of the control channel, and the segments' results."""

    def __init__(self, R, spec: dict, plan: list, place, summary, session, backend,
                 indices: list[int]):
        self.R, self.spec = R, spec
        self.plan = plan  # [(position, Slot)] in the order the workload measures them
        # place(spec, position, slot): a segment's run id, folder and spec.sweep
        # (a sweep folder's run, or a Slurm job's run on this node: placements below).
        self.place, self.summary = place, summary
        self.session, self.backend, self.indices = session, backend, indices
        self.folder = Path(spec["output_dir"]) / control.CONTROL_DIR
        self.next = 0
        self.open: dict | None = None  # answered, result not yet filed

    def poll(self) -> None:
        """Answer the next request, if the workload made it; a full or read-only
        disk is an OutputError (the sweep stops, the limits come back)."""
        from hpcai.launcher.output_check import write_error

        try:
            self._poll()
        except OSError as exc:
            raise write_error(self.folder, exc, "the in-run control channel or a segment's "
                              "result", "free space or make the folder writable, then run the "
                              "same command again (complete segments are kept)") from None

    def _poll(self) -> None:
        if control.read(control.request_path(self.folder, self.next)) is None:
            return
        k, self.next = self.next, self.next + 1
        if self.open is not None:
            self.file(code=None)
        if k >= len(self.plan):
            control.write_atomic(control.answer_path(self.folder, k), {"segment": k, "done": True})
            return
        position, slot = self.plan[k]
        try:
            if slot.cap_w != self.session.cap_w:
                self.session.change_cap(slot.cap_w)
        except HpcaiError as exc:
            control.write_atomic(control.answer_path(self.folder, k),
                                 {"segment": k, "done": False, "error": exc.one_line()})
            self.summary.set_run(position, quiet=True, status="failed", message=exc.one_line())
            raise
        self._start(k, position, slot)

    def _start(self, k: int, position: int, slot) -> None:
        from hpcai.launcher import output_check

        spec = copy.deepcopy(self.spec)
        spec.pop("inrun", None)
        spec["power"]["cap_w"] = slot.cap_w
        self.place(spec, position, slot)
        run_dir = Path(spec["output_dir"])
        # A `running` result first: any ending marks it, none leaves it counted.
        output_check.first_write(run_dir, spec, self.R.placeholder_result(spec, run_dir))
        enforced = {str(i): g["enforced_w"] if g["enforced_w"] is not None else g["applied_w"]
                    for i, g in self.session.gpus.items()}
        self.open = {"k": k, "position": position, "slot": slot, "spec": spec, "dir": run_dir,
                     "limits": copy.deepcopy(self.session.gpus), "enforced": enforced}
        self.summary.set_run(position, status="running", run_id=spec["run_id"], skipped=False,
                             result=f"{spec['run_id']}/result.json", message=None)
        self.R.log(f"in-run segment {k + 1}/{len(self.plan)}: {slot.describe()}, enforced "
                   f"{', '.join(f'{w:g} W' for w in enforced.values() if w is not None)}")
        control.write_atomic(control.answer_path(self.folder, k), {
            "segment": k, "done": False, "cap_w": slot.cap_w, "enforced_w": enforced,
            "spec": {key: spec[key] for key in ("run_id", "output_dir", "power", "sweep", "slurm")
                     if key in spec}})

    def file(self, code: int | None, interrupted: Interrupted | None = None) -> None:
        """The open segment's result.json: the workload's segment.json with the
        limits this launcher set and read, checked against the schema; a segment
        the workload did not finish is marked so, never complete."""
        from hpcai.launcher import results
        from hpcai.measure import validity
        from hpcai.workloads.result import clean, write_json_atomic

        seg, self.open = self.open, None
        end = self.R.limits_in_force(self.backend, self.indices)
        path, result = seg["dir"] / "segment.json", seg["dir"] / "result.json"
        try:
            doc = results.load(path)
        except ResultError:
            doc = None
        if doc is None:
            try:
                doc = results.load(result)
            except ResultError:
                doc = None
            if doc is None:  # nothing to mark (a full disk): the summary says it
                self.summary.set_run(seg["position"], quiet=True, status="failed",
                                     message="the segment left no result")
                return
            if interrupted is not None:
                results.mark_interrupted(doc, interrupted.one_line())
            else:
                results.mark_crashed(doc, code if code is not None else -1)
        if doc["status"] == "running":
            results.mark_interrupted(doc, "the process stopped")
        # Stopped before the workload opened it: the placeholder says which segment it was.
        doc.setdefault("segment", {"index": seg["k"], "in_run": True,
                                   "process_run_id": self.spec["run_id"],
                                   "after_segment": seg["k"] - 1 if seg["k"] else None,
                                   "cap_w": seg["slot"].cap_w, "enforced_w": seg["enforced"]})
        tolerance = float(seg["spec"]["power"]["cap_tolerance_frac"])
        results.apply_limits(doc, seg["limits"], seg["slot"].cap_w, tolerance)
        doc["launcher"] = {"command_exit_code": code,
                           "gpu_limits": results.limits_record(seg["limits"], end)}
        idle = results.sweep_idle_baseline(seg["dir"], seg["spec"])
        if idle is not None:
            doc["launcher"]["idle_baseline"] = idle
        # Again, now that the enforced limits and the idle baseline are in (as for a run).
        doc["validity"] = validity.evaluate(doc, "launcher")
        doc = clean(doc)
        status, message = doc["status"], (doc.get("error") or {}).get("message")
        errors = results.validation_errors(doc)
        if errors:
            status, message = "failed", f"does not match the result schema: {errors[0]}"
            doc["status"], doc["error"] = "failed", {"type": "ResultError", "message": message}
        write_json_atomic(result, doc)
        path.unlink(missing_ok=True)
        self.summary.set_run(seg["position"], quiet=True, status=status, message=message)
        self.R.log(f"in-run segment {seg['k'] + 1}: {seg['slot'].describe()} {status}"
                   + (f" ({message})" if message else ""))


# ---- the process ----------------------------------------------------------------
def run(R, opts, slots: list, todo: list[int], digest: str, sweep_dir: Path, seed: int,
        summary) -> None:
    """One process for every slot still to do, in the sweep's order."""
    import dataclasses

    first = slots[todo[0]]
    spec, command, site, node = R.plan(dataclasses.replace(
        opts, cap_w=first.cap_w, caps=None, output=str(sweep_dir)))
    spec["run_id"] = spec["run_id"] + "-inrun"
    spec["output_dir"] = str(sweep_dir / spec["run_id"])
    command = process_command(spec, site, len(todo))
    block = {"id": sweep_dir.name, "key": digest, "repeats": opts.repeat, "order": opts.order,
             "seed": seed, "in_run": True, "process_run_id": spec["run_id"]}
    R.log(f"in-run sweep: one process measures {len(todo)} segment(s) in {spec['output_dir']}")
    execute(R, spec, command, site, node, opts,
            lambda session, backend, indices: Segments(
                R, spec, [(i, slots[i]) for i in todo], sweep_place(sweep_dir, block), summary,
                session, backend, indices))


def process_command(spec: dict, site: dict, segments: int) -> list[str]:
    """The in-run process's spec (its protocol resolved for segments, its control
    channel) and command. Its folder holds the spec, the log and the channel; its
    record is process.json, not a result (each segment writes one)."""
    from hpcai.launcher import runtime
    from hpcai.measure.adaptive import resolve_protocol

    spec["protocol"] = resolve_protocol(spec["protocol"], spec["preset"], in_run=True)
    spec["inrun"] = {"channel": control.CONTROL_DIR, "segments": segments}
    return runtime.command(spec, site, str(Path(spec["output_dir"]) / "spec.json"))


def sweep_place(sweep_dir: Path, block: dict):
    """Each segment a run folder of the sweep, with a run id of its own."""
    from hpcai.launcher.spec import make_run_id

    def place(spec: dict, position: int, slot) -> None:
        spec["run_id"] = make_run_id(spec["workload"], spec["preset"], slot.cap_w)
        spec["output_dir"] = str(sweep_dir / spec["run_id"])
        spec["sweep"] = {**block, "position": position, "repeat": slot.repeat}
    return place


def execute(R, spec: dict, command: list[str], site: dict, node, opts, make_segments) -> None:
    """run.execute's lifecycle (cap session, lifeline, signals, the workload's
    log), with the control channel served while the workload runs."""
    from hpcai.launcher import output_check, runtime
    from hpcai.launcher.lifeline import Lifeline
    from hpcai.launcher.power import CapSession, make_backend
    from hpcai.launcher.power.journal import record_workload
    from hpcai.launcher.workload_log import LogFollower

    run_dir = Path(spec["output_dir"])
    indices = spec["devices"]["gpu_indices"] or []
    journal = R.journal_path(site, opts.journal)
    backend = make_backend(spec["power"]["method"], node.vendor, site["power"]["command"])
    env = runtime.environment(spec, site)
    child, interrupted = None, None
    signals = R.ChildSignals(spec)

    with contextlib.ExitStack() as stack:
        stack.enter_context(install_signal_handlers(signals.forward))
        stack.callback(backend.close)
        # Entered last, so it exits first: limits come back before anything else.
        session = stack.enter_context(
            CapSession(backend, spec["power"]["cap_w"], indices, journal))
        R.log(f"power limit set to {spec['power']['cap_w']:g} W on GPU(s) "
              f"{', '.join(map(str, indices))} for the warm-up; the limits from before the "
              "sweep are restored when it ends")
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise output_check.write_error(run_dir.parent, exc, "the run folder",
                                           "free space or make the folder writable") from None
        output_check.write_new_json(run_dir / "spec.json", spec, "the run spec")
        lifeline = stack.enter_context(Lifeline(run_dir, spec["run_id"]))
        if lifeline.problem:
            R.log(f"no lifeline for the workload ({lifeline.problem}); "
                  "if this launcher is killed, stop the workload by hand")
        env.update(lifeline.environment(container=spec["runtime"]["kind"] == "apptainer"))
        follower = LogFollower(run_dir)
        stack.callback(follower.stop)
        if spec["runtime"]["kind"] == "apptainer":
            image = spec["runtime"]["image"]
            R.log(f"runtime: apptainer, image {image['path']} (sha256 {image['sha256'][:12]})")
        segments = make_segments(session, backend, indices)
        failure: BaseException | None = None
        try:
            child = signals.child = R._start(command, env, follower, run_dir)
            follower.start()
            record_workload(journal, child.pid, spec["run_id"])
            while child.poll() is None:
                segments.poll()
                time.sleep(POLL_S)
            segments.poll()  # a last request, made just before the workload exited
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
            signals.stop(interrupted.signum)
        except BaseException as exc:  # a cap that did not take: stop, then restore
            failure = exc
            signals.stop(signal.SIGTERM, already_sent=False)
        # The last segment's limits are read before the snapshot comes back.
        if segments.open is not None and interrupted is not None and signals.under_slurm:
            # torchrun may die of srun's second SIGTERM while its workers still write.
            _await_file(segments.open["dir"] / "segment.json", R.ORPHAN_WAIT_S)
        if segments.open is not None:
            try:
                segments.file(child.returncode if child is not None else None, interrupted)
            except OSError as exc:
                failure = failure or output_check.write_error(
                    run_dir, exc, "the last segment's result",
                    "free space or make the folder writable, then run the same command again")
    R.log("power limits restored")
    code = child.returncode if child is not None else None
    if interrupted is None and code not in (0, None):
        R.log(f"the in-run process exited with code {code}; see {run_dir / 'workload.log'}")
    if interrupted is not None:
        raise interrupted
    if failure is not None:
        raise failure


def _await_file(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(POLL_S)
