"""A single run on this node: plan, check, preflight, one workload process,
its result finished and summarised."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from hpcai.errors import HpcaiError, WorkloadError
from hpcai.launcher.run import output_check
from hpcai.launcher.run import results
from hpcai.launcher.run.options import Options, log
from hpcai.launcher.run.plan import RunPlan, check_limits, clock_request, make_plan, preflight
from hpcai.launcher.run.process import (ORPHAN_WAIT_S, WorkloadProcess, await_file, finish_result,
                                    placeholder_result, result_is_final)
from hpcai.spec import RunSpec


def run_single(opts: Options, placement: dict | None = None, run_id: str | None = None) -> int:
    """Inside a Slurm job, `placement` is this node's place and `run_id` the id all
    nodes share (launcher/run/plan.py)."""
    run = make_plan(opts, placement, run_id)
    spec = run.spec
    if opts.protocol.get("ci_target") not in (None, "off") and \
            spec.protocol.get("ci_target") is None:
        log(f"note: {spec.workload} measures the preset's fixed protocol (serving: one "
            "load of --steps-per-epoch requests); --ci-target applies to the training workloads")
    clocks = clock_request(opts)
    check_limits(run, [opts.cap_w], [(clocks["sm_mhz"], clocks["mem_mhz"])] if clocks else [],
                 profiles=[opts.power_profile])
    if opts.dry_run:
        from hpcai.launcher.cli.dry_run import print_run

        print_run(spec, run.command, opts.dry_run_json)
        return 0
    preflight(run, Path(spec.output_dir).parent)
    return execute(run)


def execute(run: RunPlan) -> int:
    """One workload process under the plan's limits; its result finished."""
    spec, run_dir = run.spec, Path(run.spec.output_dir)
    end_limits: dict[int, float | None] = {}
    proc = None
    try:
        with WorkloadProcess(run) as proc:
            end_limits = _run_workload(proc, run_dir, spec)
    except HpcaiError:
        if proc is not None and proc.code is not None:
            # The workload ended but a limit did not come back (a lost GPU): its result
            # still gets the launcher's step, never left `complete` without it.
            with contextlib.suppress(HpcaiError, OSError):
                write_result(run_dir, spec, proc, end_limits)
        raise
    return _after_limits(run, proc, end_limits)


def _run_workload(proc: WorkloadProcess, run_dir: Path, spec: RunSpec) -> dict:
    """Inside the limits: the run's first files, the workload, and the limits in
    force as it ended."""
    # Only now, with the cap in place, does the run leave anything on disk:
    # the folder, its spec and a `running` result that any ending will mark.
    output_check.first_write(run_dir, spec.to_json(), placeholder_result(spec))
    proc.attach()
    devices = spec.devices
    log(f"run {spec.run_id}: {spec.workload} preset {spec.preset} on "
        f"{devices.nproc} {'GPU(s)' if devices.type == 'cuda' else 'CPU process(es)'}; "
        f"results in {run_dir}")
    proc.run()  # a signal from here on marks the `running` result interrupted
    # Before the limits come back: what was in force when the workload ended.
    return proc.limits_now()


def _after_limits(run: RunPlan, proc: WorkloadProcess, end_limits: dict) -> int:
    spec, run_dir = run.spec, Path(run.spec.output_dir)
    interrupted = proc.interrupted
    if interrupted is not None and proc.signals.under_slurm:
        await_file(run_dir / "result.json", ORPHAN_WAIT_S, result_is_final)
    try:
        doc = write_result(run_dir, spec, proc, end_limits)
    except WorkloadError:
        if interrupted is not None:  # stopped before it could write a result
            raise interrupted from None
        raise
    if interrupted is not None:
        raise interrupted
    return _summarize(doc, run_dir)


def write_result(run_dir: Path, spec: RunSpec, proc: WorkloadProcess, end_limits: dict) -> dict:
    """The workload's result.json, finished (launcher/run/process.py) and written back."""
    from hpcai.result_document import write_json_atomic

    path = run_dir / "result.json"
    doc = results.load(path)
    if doc is None:
        raise WorkloadError(f"the workload exited with code {proc.code} and wrote no result",
                            f"see {run_dir / 'workload.log'}; the run spec is "
                            f"{run_dir / 'spec.json'}")
    if proc.stalled:
        from hpcai.launcher.run.stall import mark_stalled

        mark_stalled(doc, proc.stalled)
    doc = finish_result(doc, run_dir, spec, proc.code, proc.limits, end_limits,
                        proc.interrupted, proc.clock_session, proc.profile_session, proc.outlived)
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
        # Why, in the result's own words (no RAPL access, telemetry off, ...).
        parts.append("power not measured" + (f" ({power['reason']})" if power.get("reason") else ""))
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

    solved = ((doc.get("workload_metrics") or {}).get("exec") or {})
    if solved.get("time_to_solution_s") is not None:
        energy, edp = solved.get("energy_to_solution_j"), solved.get("edp_js")
        notes.append(f"time to solution {solved['time_to_solution_s']:.3g} s" + (
            f", energy to solution {energy:.4g} J, EDP {edp:.4g} J*s" if energy is not None
            else " (energy not measured)"))

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
