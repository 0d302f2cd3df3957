"""Power-cap sweeps: one run per cap and repeat, in an order that does not let
heat bias the result, resumable, with a summary file and an idle baseline.

A sweep lives in `<results>/<sweep-id>/`: `sweep.json` (the summary) and one
run folder per attempt. The sweep id is a hash of everything that defines the
measurement except the caps, so running the same command again finds the
same folder and runs only the cap/repeat slots without a schema-valid
`complete` result.
"""
from __future__ import annotations

import dataclasses
import json
import signal
from dataclasses import dataclass
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import HpcaiError, Interrupted, ResultError, UsageError, WorkloadError
from hpcai.launcher.run.options import log
from hpcai.launcher.run.plan import clock_label
from hpcai.signals import install_signal_handlers
from hpcai.launcher.sweep.idle import measure_idle
from hpcai.launcher.sweep.resume import (_failed_check_names, attempts, completed_slots, key_hash, measurement_key,
                                        run_slot, sweep_id)
from hpcai.launcher.sweep.slots import Slot, new_seed, schedule
from hpcai.launcher.sweep.summary import SUMMARY_FILE, SUMMARY_VERSION, Summary, _counts


@dataclass
class _Sweep:
    """One sweep as planned: its axes, its first run's plan, its folder and slots."""

    opts: object  # Options
    caps: list
    sm_clocks: list
    mem_clocks: list
    points: list
    profiles: list
    device: str | None  # a --vary grid's device (a CPU run's `gpus` are processes)
    in_run: bool
    plan: object = None  # RunPlan of the first slot
    key: dict | None = None
    digest: str = ""
    folder: Path | None = None
    seed: int = 0
    slots: list | None = None
    done: dict | None = None
    previous: Summary | None = None

    def slot_plan(self, point, slot: Slot, **changes):
        from hpcai.launcher.sweep import grid
        from hpcai.launcher.run.plan import make_plan

        return make_plan(dataclasses.replace(
            _slot_options(grid.apply(self.opts, point, self.device), slot), **changes))


def run_sweep(opts) -> int:
    """Check everything, then one process per slot (or one in-run process for
    them all); the limits come back after each."""
    from hpcai.launcher.run.plan import preflight

    sweep = _plan_sweep(opts)
    if opts.dry_run:
        return _dry_run(sweep)
    # Journal, free space, output: all before the idle baseline measures anything.
    _check_other_points(sweep)
    from hpcai.launcher.site.trust import claim_folder

    _guarded_output(claim_folder, sweep.folder, "the sweep folder")
    with _sweep_lock(sweep.folder):
        # What is done, read again now that no other sweep can be writing here.
        _read_folder(sweep)
        return _run_locked(sweep, preflight)


def _sweep_lock(folder: Path):
    """The sweep folder, locked (flock on the folder itself, opened without following a
    link) for as long as this sweep runs: a second sweep into it is refused, so two
    never both run the same slots (`--repeat 2` giving 4 results)."""
    import errno
    import fcntl

    from hpcai.safe_files import Folder

    held = Folder.open(folder)
    try:
        fcntl.flock(held.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        held.close()
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise UsageError(f"another sweep is running into {folder}",
                             "wait for it to end, then run the same command again: it runs "
                             "only the slots still missing") from None
        raise
    return held


def _run_locked(sweep: _Sweep, preflight) -> int:
    opts = sweep.opts
    preflight(sweep.plan, sweep.folder)
    summary = _new_summary(sweep)
    todo = [i for i, s in enumerate(sweep.slots) if s not in sweep.done]
    log(f"sweep {sweep.folder.name}: {len(sweep.slots)} run(s), "
        f"{len(sweep.slots) - len(todo)} already complete, order {opts.order} "
        f"(seed {sweep.seed}); summary in {summary.path}")
    summary.write()
    try:
        # Signals between runs, too, end the sweep with an honest summary.
        with install_signal_handlers():
            _run_todo(sweep, summary, todo)
    except (Interrupted, KeyboardInterrupt) as exc:
        summary.doc["status"] = "interrupted"
        summary.refresh_attempts()
        summary.write(quiet=True)
        raise exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT) from None
    except HpcaiError:
        summary.doc["status"] = "stopped"
        summary.refresh_attempts()
        summary.write(quiet=True)
        raise
    except Exception:  # a bug must not leave sweep.json `running` for good
        summary.doc["status"] = "stopped"
        summary.write(quiet=True)
        raise
    return _finish(summary)


def _guarded_output(fn, folder: Path, what: str) -> None:
    from hpcai.launcher.run.output_check import write_error

    try:
        fn(folder, what)
    except OSError as exc:
        raise write_error(folder.parent, exc, what, "free space or make the folder writable, "
                          "or choose another with --output") from None


def _plan_sweep(opts) -> _Sweep:
    """The sweep's axes and first plan, every cap and clock checked, its folder and
    slots (those already complete found)."""
    from hpcai.launcher.sweep import grid
    from hpcai.launcher.sweep import inrun_support
    from hpcai.launcher.run.plan import check_limits, make_plan
    from hpcai.measure.adaptive import SWEEP_CI_TARGET

    caps = list(opts.caps) if opts.caps else [None]
    inrun_support.check_request(opts.in_run, caps, other_axes=_other_axes(opts))
    if opts.protocol.get("ci_target") is None:  # sweeps measure adaptively by default
        opts = dataclasses.replace(opts, protocol={**opts.protocol, "ci_target": SWEEP_CI_TARGET})
    in_run = inrun_support.choose(opts, log, other_axes=_other_axes(opts))
    device = None
    if opts.vary:  # a CPU run's `gpus` are its processes: the device decides
        device = make_plan(dataclasses.replace(opts, cap_w=None, caps=None, sm_clocks=None,
                                               mem_clocks=None, power_profiles=None)).spec.devices.type
    sweep = _Sweep(opts, caps, list(opts.sm_clocks) if opts.sm_clocks else [None],
                   list(opts.mem_clocks) if opts.mem_clocks else [None],
                   grid.points(opts.vary or []),
                   list(opts.power_profiles) if opts.power_profiles else [opts.power_profile],
                   device, in_run)
    sweep.plan = sweep.slot_plan(sweep.points[0], _first_slot(sweep))
    # Every cap, clock and profile checked before the first one is set.
    check_limits(sweep.plan, caps, [(sm, mem) for sm in sweep.sm_clocks
                                    for mem in sweep.mem_clocks], profiles=sweep.profiles)
    _find_folder(sweep)
    return sweep


def _first_slot(sweep: _Sweep) -> Slot:
    return Slot(sweep.caps[0], 0, sweep.sm_clocks[0], sweep.mem_clocks[0], profile=sweep.profiles[0])


def _find_folder(sweep: _Sweep) -> None:
    """The sweep's id and folder from what it measures; its seed and done slots."""
    opts, spec = sweep.opts, sweep.plan.spec.to_json()
    key = measurement_key(spec)
    if opts.vary:  # the first point's values are in the spec; the grid names them all
        key["vary"] = [[name, values] for name, values in opts.vary]
    if sweep.in_run:  # its own sweep folder: comparable in one report, never mixed in one sweep
        key["mode"] = "in-run"
    sweep.key, sweep.digest = key, key_hash(key)
    sweep.folder = Path(spec["output_dir"]).parent / sweep_id(spec, sweep.digest)
    from hpcai.launcher.site.trust import refuse_planted

    # Its name is predictable: one planted by someone else is refused, never read.
    refuse_planted(sweep.folder, "the sweep folder")
    _read_folder(sweep)


def _read_folder(sweep: _Sweep) -> None:
    """The sweep's previous summary, seed, slots and the slots already done."""
    opts = sweep.opts
    summary_path = sweep.folder / SUMMARY_FILE
    sweep.previous = Summary.load(summary_path) if summary_path.exists() else None
    sweep.seed = opts.seed if opts.seed is not None else (
        sweep.previous.doc.get("seed") if sweep.previous else new_seed())
    sweep.slots = schedule(sweep.caps, opts.repeat, opts.order, sweep.seed, sweep.sm_clocks,
                           sweep.mem_clocks, sweep.points, sweep.profiles)
    sweep.done = completed_slots(sweep.folder, sweep.digest) if sweep.folder.exists() else {}


def _dry_run(sweep: _Sweep) -> int:
    from hpcai.launcher.cli.dry_run import print_sweep

    opts, slots, done = sweep.opts, sweep.slots, sweep.done
    plan = {"sweep_id": sweep.folder.name, "folder": str(sweep.folder),
                      "seed": sweep.seed, "order": opts.order, "in_run": sweep.in_run,
                      **({"vary": dict(opts.vary)} if opts.vary else {}), "runs": [
                          {**({"point": dict(s.point)} if s.point else {}),
                           "cap_w": s.cap_w, **_clock_fields(s), "repeat": s.repeat,
                           "status": "complete" if s in done else "to run"} for s in slots]}
    commands = [sweep.slot_plan(point, slots[0], output=str(sweep.folder)).command
                for point in sweep.points]  # every point planned: a bad one is refused now
    first = commands[sweep.points.index(slots[0].point)]
    print_sweep(plan, sweep.plan.spec.protocol, opts.idle_s, first, opts.dry_run_json)
    return 0


def _check_other_points(sweep: _Sweep) -> None:
    """Every point planned before anything runs (a bad one is refused now), and
    every cap checked on every point's GPUs."""
    from hpcai.launcher.run.plan import check_limits

    for point in sweep.points[1:] if sweep.opts.vary else []:
        other = sweep.slot_plan(point, _first_slot(sweep))
        if sweep.caps[0] is not None and sweep.plan.node.gpus:
            check_limits(other, sweep.caps)


def _new_summary(sweep: _Sweep) -> Summary:
    opts, spec, previous, done = sweep.opts, sweep.plan.spec, sweep.previous, sweep.done
    tried = attempts(sweep.folder, sweep.digest)
    summary = Summary(sweep.folder / SUMMARY_FILE, {
        "kind": "hpcai.sweep", "sweep_version": SUMMARY_VERSION, "sweep_id": sweep.folder.name,
        "key": sweep.digest, "measurement": sweep.key, "workload": spec.workload,
        "preset": spec.preset, "caps_w": sweep.caps,
        **_clock_axes(sweep.sm_clocks, sweep.mem_clocks),
        **({"power_profiles": sweep.profiles} if sweep.profiles != [None] else {}),
        "repeat": opts.repeat, "order": opts.order, "in_run": sweep.in_run,
        **({"vary": [[name, values] for name, values in opts.vary]} if opts.vary else {}),
        "seed": sweep.seed, "created": previous.doc.get("created") if previous else now_iso(),
        "idle_baseline": previous.doc.get("idle_baseline") if previous else None,
        "status": "running",
        "runs": [{"position": i, **({"point": dict(s.point)} if s.point else {}),
                  "cap_w": s.cap_w, **_clock_fields(s), "repeat": s.repeat,
                  "status": "complete" if s in done else "pending",
                  "run_id": done.get(s), "skipped": s in done,
                  "result": f"{done[s]}/result.json" if s in done else None,
                  "message": "already complete" if s in done else None,
                  "attempts": tried.get(s, [])} for i, s in enumerate(sweep.slots)],
    })
    summary.doc["counts"] = _counts(summary.doc["runs"])
    return summary


def _run_todo(sweep: _Sweep, summary: Summary, todo: list[int]) -> None:
    """The idle baseline (once, before the first run), then the runs still to do."""
    from hpcai.launcher.sweep import grid
    from hpcai.launcher.sweep import inrun

    opts, spec = sweep.opts, sweep.plan.spec.to_json()
    if todo and not (summary.doc["idle_baseline"] or {}).get("available"):
        # Before the first run, while the GPUs are idle and at their own limits.
        summary.doc["idle_baseline"] = measure_idle(
            spec["devices"]["vendor"], spec["devices"]["gpu_indices"], opts.idle_s,
            float(spec["protocol"]["sample_interval_s"]), spec.get("node_power"))
        _log_idle(summary.doc["idle_baseline"])
        summary.write()
    if sweep.in_run and todo:
        inrun.run(opts, sweep.slots, todo, sweep.digest, sweep.folder, sweep.seed, summary)
    for i in [] if sweep.in_run else todo:
        _run_slot(grid.apply(opts, sweep.slots[i].point, sweep.device), sweep.slots[i], i,
                  len(sweep.slots), sweep.digest, sweep.folder, sweep.seed, summary)


def _run_slot(opts, slot: Slot, position: int, total: int, digest: str, sweep_dir: Path,
              seed: int, summary: Summary) -> None:
    from hpcai.launcher.run.plan import make_plan
    from hpcai.launcher.run.single import execute

    plan = make_plan(dataclasses.replace(_slot_options(opts, slot), output=str(sweep_dir)))
    block = {"id": sweep_dir.name, "key": digest, "position": position, "repeat": slot.repeat,
             "repeats": opts.repeat, "order": opts.order, "seed": seed}
    if slot.point:
        block["point"] = [[name, value] for name, value in slot.point]
    plan = dataclasses.replace(plan, spec=plan.spec.in_sweep(block))
    spec = plan.spec
    log(f"sweep run {position + 1}/{total}: {slot.describe()}")
    summary.set_run(position, status="running", run_id=spec.run_id, skipped=False,
                    result=f"{spec.run_id}/result.json", message=None)
    try:
        execute(plan)
    except (WorkloadError, ResultError) as exc:
        # This run failed; the others may still work (another cap, a transient error).
        status = _result_status(sweep_dir / spec.run_id / "result.json")
        summary.set_run(position, status=status, message=exc.one_line())
        log(f"sweep run {position + 1}/{total} {status}: {exc.one_line()}; continuing")
        return
    except (Interrupted, KeyboardInterrupt) as exc:
        why = exc.one_line() if isinstance(exc, Interrupted) else "interrupted by SIGINT"
        summary.set_run(position, quiet=True, status="interrupted", message=why)
        raise
    except HpcaiError as exc:  # power or configuration trouble: stop the sweep
        summary.set_run(position, quiet=True, status="failed", message=exc.one_line())
        raise
    failed = _failed_checks_of(sweep_dir / spec.run_id / "result.json")
    if failed:  # complete, but the report will not count it: resume measures it again
        summary.set_run(position, status="invalid",
                        message=f"failed validity check(s): {', '.join(failed)}")
        return
    summary.set_run(position, status="complete")


def _slot_options(opts, slot: Slot):
    """The options of one plain run: this slot's cap and clocks, no sweep lists."""
    return dataclasses.replace(opts, cap_w=slot.cap_w, caps=None,
                               sm_clock_mhz=slot.sm_clock_mhz, mem_clock_mhz=slot.mem_clock_mhz,
                               sm_clocks=None, mem_clocks=None,
                               power_profile=slot.profile, power_profiles=None)


def _clock_fields(slot: Slot) -> dict:
    """A run entry's clock caps and power profile; none without them (summaries stay as they were)."""
    return {k: v for k, v in (("sm_clock_mhz", slot.sm_clock_mhz),
                              ("mem_clock_mhz", slot.mem_clock_mhz),
                              ("power_profile", slot.profile)) if v is not None}


def _clock_axes(sm_clocks: list, mem_clocks: list) -> dict:
    return {k: v for k, v in (("sm_clocks_mhz", sm_clocks), ("mem_clocks_mhz", mem_clocks))
            if v != [None]}


def _other_axes(opts) -> str | None:
    """What besides the cap this sweep varies or fixes (clock caps, a --vary grid):
    in-run sweeps change only the cap, so these run one process per slot."""
    if opts.vary:
        return "a --vary grid"
    if opts.sm_clocks or opts.mem_clocks or opts.sm_clock_mhz or opts.mem_clock_mhz:
        return "clock caps"
    if opts.power_profiles or opts.power_profile:
        return "power profiles"
    return None


def _failed_checks_of(path: Path) -> list[str]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return _failed_check_names(doc) if isinstance(doc, dict) else []


def _result_status(path: Path) -> str:
    try:
        status = json.loads(path.read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return "failed"
    return status if status in ("failed", "interrupted") else "failed"


def _log_idle(baseline: dict) -> None:
    if baseline.get("available"):
        log(f"idle baseline: {baseline['total_power_w']:.0f} W over {baseline['seconds']:.1f} s")
    else:
        log(f"idle baseline not measured: {baseline.get('reason')}")


def _finish(summary: Summary) -> int:
    runs = summary.doc["runs"]
    bad = [r for r in runs if r["status"] != "complete"]
    summary.doc["status"] = "complete" if not bad else "incomplete"
    summary.refresh_attempts()
    summary.write()
    print(f"sweep {summary.doc['sweep_id']}: {len(runs)} run(s)")
    for r in runs:
        cap = "uncapped" if r["cap_w"] is None else f"{r['cap_w']:g} W"
        clocks = clock_label(r.get("sm_clock_mhz"), r.get("mem_clock_mhz"))
        if r.get("power_profile"):
            clocks = ", ".join(c for c in (clocks, f"profile {r['power_profile']}") if c)
        note = " (already complete, skipped)" if r.get("skipped") else ""
        where = "".join(f"{n} {v}  " for n, v in (r.get("point") or {}).items())
        print(f"  {where}{cap:>8}  {clocks + '  ' if clocks else ''}repeat {r['repeat'] + 1}  "
              f"{r['status']}{note}  {r['run_id'] or ''}")
    print(f"summary: {summary.path}")
    if bad:
        first = bad[0]
        raise WorkloadError(
            f"sweep incomplete: {len(bad)} of {len(runs)} run(s) not complete "
            f"(first: {run_slot(first).describe()}, {first['status']})",
            f"see {summary.path}; run the same command again to retry only those")
    return 0
