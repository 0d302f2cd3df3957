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

import copy
import dataclasses
import signal
from pathlib import Path

from hpcai.errors import HpcaiError, Interrupted, ResultError
from hpcai.launcher.run.options import log
from hpcai.launcher.run.plan import RunPlan, make_plan
from hpcai.launcher.run.process import (ORPHAN_WAIT_S, WorkloadProcess, await_file, finish_result,
                                    limits_in_force, placeholder_result)
from hpcai.spec import RunSpec
from hpcai.workloads import control


# ---- the segments -------------------------------------------------------------
class Segments:
    """The launcher's end of the control channel, and the segments' results."""

    def __init__(self, spec: RunSpec, plan: list, place, summary, session, backend,
                 indices: list[int]):
        self.spec = spec  # the process's
        self.plan = plan  # [(position, Slot)] in the order the workload measures them
        # place(spec, position, slot) -> spec: a segment's run id, folder and spec.sweep
        # (a sweep folder's run, or a Slurm job's run on this node: placements below).
        self.place, self.summary = place, summary
        self.session, self.backend, self.indices = session, backend, indices
        self.folder = Path(spec.output_dir) / control.CONTROL_DIR
        self.next = 0
        self.open: dict | None = None  # answered, result not yet filed
        self.stalled: str | None = None  # the stall watchdog's reason, for the open segment
        self.filed: tuple[Path, dict] | None = None  # the last result.json written, and its document

    def poll(self) -> None:
        """Answer the next request, if the workload made it; a full or read-only
        disk is an OutputError (the sweep stops, the limits come back)."""
        from hpcai.launcher.run.output_check import write_error

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
        from hpcai.launcher.run import output_check

        spec = self.place(self.spec.as_segment().with_cap(slot.cap_w), position, slot)
        doc, run_dir = spec.to_json(), Path(spec.output_dir)
        # A `running` result first: any ending marks it, none leaves it counted.
        output_check.first_write(run_dir, doc, placeholder_result(spec))
        enforced = {str(i): g["enforced_w"] if g["enforced_w"] is not None else g["applied_w"]
                    for i, g in self.session.gpus.items()}
        self.open = {"k": k, "position": position, "slot": slot, "spec": spec, "dir": run_dir,
                     "limits": copy.deepcopy(self.session.gpus), "enforced": enforced}
        self.summary.set_run(position, status="running", run_id=spec.run_id, skipped=False,
                             result=f"{spec.run_id}/result.json", message=None)
        self.session.mark_segment(k, slot.cap_w)  # the exporter's hpcai_run_segment
        log(f"in-run segment {k + 1}/{len(self.plan)}: {slot.describe()}, enforced "
            f"{', '.join(f'{w:g} W' for w in enforced.values() if w is not None)}")
        control.write_atomic(control.answer_path(self.folder, k), {
            "segment": k, "done": False, "cap_w": slot.cap_w, "enforced_w": enforced,
            "spec": {key: doc[key] for key in ("run_id", "output_dir", "power", "sweep", "slurm")
                     if key in doc}})

    def file(self, code: int | None, interrupted: Interrupted | None = None) -> None:
        """The open segment's result.json: the workload's segment.json with the
        limits this launcher set and read, checked against the schema; a segment
        the workload did not finish is marked so, never complete."""
        from hpcai.launcher.run import results
        from hpcai.result_document import write_json_atomic

        seg, self.open = self.open, None
        end = limits_in_force(self.backend, self.indices)
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
        if self.stalled:
            from hpcai.launcher.run.stall import mark_stalled

            mark_stalled(doc, self.stalled)
        if doc["status"] == "running":
            results.mark_interrupted(doc, "the process stopped")
        # Stopped before the workload opened it: the placeholder says which segment it was.
        doc.setdefault("segment", {"index": seg["k"], "in_run": True,
                                   "process_run_id": self.spec.run_id,
                                   "after_segment": seg["k"] - 1 if seg["k"] else None,
                                   "cap_w": seg["slot"].cap_w, "enforced_w": seg["enforced"]})
        doc = finish_result(doc, seg["dir"], seg["spec"], code, seg["limits"], end)
        status, message = doc["status"], (doc.get("error") or {}).get("message")
        errors = results.validation_errors(doc)
        if errors:
            status, message = "failed", f"does not match the result schema: {errors[0]}"
            doc["status"], doc["error"] = "failed", {"type": "ResultError", "message": message}
        write_json_atomic(result, doc)
        self.filed = (result, doc)
        path.unlink(missing_ok=True)
        failed = [c.get("name", "?") for c in (doc.get("validity") or {}).get("checks") or []
                  if c.get("verdict") == "fail"]
        if status == "complete" and failed:  # the report leaves it out: resume measures it again
            status, message = "invalid", f"failed validity check(s): {', '.join(dict.fromkeys(failed))}"
        self.summary.set_run(seg["position"], quiet=True, status=status, message=message)
        log(f"in-run segment {seg['k'] + 1}: {seg['slot'].describe()} {status}"
            + (f" ({message})" if message else ""))


# ---- the process ----------------------------------------------------------------
def run(opts, slots: list, todo: list[int], digest: str, sweep_dir: Path, seed: int,
        summary) -> None:
    """One process for every slot still to do, in the sweep's order."""
    first = slots[todo[0]]
    plan = make_plan(dataclasses.replace(opts, cap_w=first.cap_w, caps=None,
                                         output=str(sweep_dir)))
    process_id = plan.spec.run_id + "-inrun"
    plan = process_plan(plan, len(todo), plan.spec.placed(
        run_id=process_id, output_dir=str(sweep_dir / process_id)))
    spec = plan.spec
    block = {"id": sweep_dir.name, "key": digest, "repeats": opts.repeat, "order": opts.order,
             "seed": seed, "in_run": True, "process_run_id": spec.run_id}
    log(f"in-run sweep: one process measures {len(todo)} segment(s) in {spec.output_dir}")
    execute(plan, lambda session, backend, indices: Segments(
        spec, [(i, slots[i]) for i in todo], sweep_place(sweep_dir, block), summary,
        session, backend, indices))


def process_plan(plan: RunPlan, segments: int, spec: RunSpec | None = None) -> RunPlan:
    """The in-run process's plan: its spec (`spec`, else the plan's) with the protocol
    resolved for segments and the control channel, and its command. Its folder holds
    the spec, the log and the channel; its record is process.json, not a result (each
    segment writes one)."""
    from hpcai.launcher.run import runtime
    from hpcai.measure.adaptive import resolve_protocol
    from hpcai.workloads.catalog import preset_windows

    spec = plan.spec if spec is None else spec
    windows = preset_windows(spec.workload, spec.preset)
    spec = spec.as_process(resolve_protocol(spec.protocol.to_json(), windows, in_run=True),
                           control.CONTROL_DIR, segments)
    command = runtime.command(spec, plan.site, str(Path(spec.output_dir) / "spec.json"))
    return dataclasses.replace(plan, spec=spec, command=command)


def sweep_place(sweep_dir: Path, block: dict):
    """Each segment a run folder of the sweep, with a run id of its own."""
    from hpcai.launcher.run.spec import make_run_id

    def place(spec: RunSpec, position: int, slot) -> RunSpec:
        run_id = make_run_id(spec.workload, spec.preset, slot.cap_w)
        return spec.placed(run_id=run_id, output_dir=str(sweep_dir / run_id)).in_sweep(
            {**block, "position": position, "repeat": slot.repeat})
    return place


def execute(plan: RunPlan, make_segments) -> None:
    """One workload process (launcher/run/process.py) with the control channel served
    while it runs; every segment's result filed before the limits come back."""
    spec, run_dir = plan.spec, Path(plan.spec.output_dir)
    failure: BaseException | None = None
    segments: Segments | None = None
    with WorkloadProcess(plan, cap_note=" for the warm-up; the limits from before the "
                         "sweep are restored when it ends") as proc:
        _make_folder(run_dir, spec)
        proc.attach()
        segments = make_segments(proc.session, proc.backend, proc.indices)
        try:
            proc.run(poll=segments.poll)
        except BaseException as exc:  # a cap that did not take: stop, then restore
            failure = exc
            proc.stop(signal.SIGTERM, already_sent=False)
        last = _file_last(proc, segments, run_dir)  # always, even after a failure
        failure = failure or last
    # Found as the block ends (WorkloadProcess._end_every_rank), after the last filing.
    if proc.outlived and segments is not None:
        failure = failure or add_outlived(segments.filed, proc.outlived)
    code = proc.code
    if proc.interrupted is None and code not in (0, None):
        log(f"the in-run process exited with code {code}; see {run_dir / 'workload.log'}")
    if proc.interrupted is not None:
        raise proc.interrupted
    if failure is not None:
        raise failure
    if proc.stalled:
        from hpcai.errors import WorkloadError

        raise WorkloadError(f"the in-run process {proc.stalled}",
                            f"see {run_dir / 'workload.log'}; run the same command again to "
                            "measure the segments still to do")


def add_outlived(filed: tuple[Path, dict] | None, outlived: list[dict]):
    """Processes that outlived the in-run process, in the last filed segment's result
    (launcher.outlived_processes, as a single run's): its document as written, never
    read back, checked against the schema again. An OutputError to raise if it could
    not be written; None otherwise."""
    from hpcai.launcher.run import output_check, results
    from hpcai.result_document import write_json_atomic

    if filed is None:
        log(f"{len(outlived)} process(es) outlived the in-run process, and no segment's result "
            "was filed to record them in")
        return None
    path, doc = filed
    updated = copy.deepcopy(doc)
    launcher = updated.setdefault("launcher", {})
    launcher["outlived_processes"] = [*launcher.get("outlived_processes", []), *outlived]
    errors = results.validation_errors(updated)
    if errors:
        log(f"the outlived processes were not added to {path}: it would not match the result "
            f"schema ({errors[0]})")
        return None
    try:
        write_json_atomic(path, updated)
    except OSError as exc:
        return output_check.write_error(path.parent, exc, "the last segment's result",
                                        "free space or make the folder writable")
    log(f"{len(outlived)} process(es) outlived the in-run process: recorded in the last "
        f"segment's result, {path}")
    return None


def _make_folder(run_dir: Path, spec: RunSpec) -> None:
    from hpcai.launcher.run import output_check

    try:
        run_dir.mkdir(mode=0o755, parents=True, exist_ok=False)
    except OSError as exc:
        raise output_check.write_error(run_dir.parent, exc, "the run folder",
                                       "free space or make the folder writable") from None
    output_check.write_new_json(run_dir / "spec.json", spec.to_json(), "the run spec")


def _file_last(proc: WorkloadProcess, segments: Segments, run_dir: Path):
    """The last segment's result, its limits read before the snapshot comes back;
    an OutputError to raise if it could not be written."""
    from hpcai.launcher.run import output_check

    if segments.open is None:
        return None
    segments.stalled = proc.stalled
    if proc.interrupted is not None and proc.signals.under_slurm:
        # torchrun may die of srun's second SIGTERM while its workers still write.
        await_file(segments.open["dir"] / "segment.json", ORPHAN_WAIT_S)
    try:
        segments.file(proc.code, proc.interrupted)
    except OSError as exc:
        return output_check.write_error(
            run_dir, exc, "the last segment's result",
            "free space or make the folder writable, then run the same command again")
    return None
