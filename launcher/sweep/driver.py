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
import hashlib
import json
import math
import random
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import HpcaiError, Interrupted, ResultError, UsageError, WorkloadError
from hpcai.launcher.run.options import log
from hpcai.launcher.run.plan import clock_label
from hpcai.signals import install_signal_handlers

SUMMARY_FILE = "sweep.json"
SUMMARY_VERSION = 1
ORDERS = ("shuffle", "alternate", "ascending")
IDLE_BASELINE_S = 5.0
# A GPU busier than this (mean utilisation, %) while the idle baseline is taken
# runs someone's work: the baseline is recorded invalid and taken again on resume.
IDLE_BUSY_PCT = 5.0
MAX_SLOTS = 200  # a typo in a range should not start a week of runs


# ---- caps -----------------------------------------------------------------
def parse_caps(text: str) -> list[float]:
    """"300", "200,300,400", "200:700:100" (stop included) or a mix, as sorted watts."""
    caps: list[float] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise UsageError(f"{text!r} has an empty entry", "example: --cap 200,300,400")
        if ":" in item:
            caps.extend(_parse_range(item))
        else:
            caps.append(_watts(item))
    unique = sorted(set(caps))
    if len(unique) > MAX_SLOTS:
        raise UsageError(f"{text!r} gives {len(unique)} caps", f"use at most {MAX_SLOTS}")
    return unique


def _watts(text: str) -> float:
    raw = text.strip().lower().removesuffix("w").strip()
    try:
        number = float(raw)
    except ValueError:
        raise UsageError(f"{text!r} is not a number of watts",
                         "example: --cap 300, --cap 200,300,400 or --cap 200:700:100") from None
    if not math.isfinite(number) or number <= 0:
        raise UsageError(f"{text!r} must be a positive number of watts", "example: --cap 300")
    return number


def _parse_range(text: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != 3:
        raise UsageError(f"range {text!r} needs START:STOP:STEP", "example: --cap 200:700:100")
    start, stop, step = (_watts(p) for p in parts)
    if stop < start:
        raise UsageError(f"range {text!r} ends below its start", "example: --cap 200:700:100")
    steps = (stop - start) / step  # a tiny step (1e-320) gives inf: refused, not counted
    if not math.isfinite(steps) or steps + 1 > MAX_SLOTS:
        raise UsageError(f"range {text!r} gives more than {MAX_SLOTS} caps", "use a larger step")
    count = math.floor(steps + 1e-9) + 1
    return [round(start + i * step, 6) for i in range(count)]


# ---- clocks ---------------------------------------------------------------
def parse_clocks(text: str, flag: str = "--sm-clock") -> list[int]:
    """"1410", "1005,1410,1980", "1005:1980:165" (stop included) or a mix, as
    sorted whole MHz; each is checked against the GPUs' supported clocks later."""
    example = f"example: {flag} 1410, {flag} 1005,1410,1980 or {flag} 1005:1980:165"
    clocks: list[int] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise UsageError(f"{flag} {text!r} has an empty entry", example)
        parts = item.split(":")
        if len(parts) not in (1, 3):
            raise UsageError(f"{flag} range {item!r} needs START:STOP:STEP", example)
        values = [_mhz(p, flag, example) for p in parts]
        if len(values) == 1:
            clocks.append(values[0])
            continue
        start, stop, step = values
        if stop < start:
            raise UsageError(f"{flag} range {item!r} ends below its start", example)
        count = (stop - start) // step + 1
        if count > MAX_SLOTS:
            raise UsageError(f"{flag} range {item!r} gives {count} clocks", "use a larger step")
        clocks.extend(start + i * step for i in range(count))
    unique = sorted(set(clocks))
    if len(unique) > MAX_SLOTS:
        raise UsageError(f"{flag} {text!r} gives {len(unique)} clocks", f"use at most {MAX_SLOTS}")
    return unique


def _mhz(text: str, flag: str, example: str) -> int:
    raw = text.strip().lower().removesuffix("mhz").strip()
    try:
        number = float(raw)
    except ValueError:
        raise UsageError(f"{flag} {text.strip()!r} is not a clock in MHz", example) from None
    if not math.isfinite(number) or number <= 0 or number != int(number):
        raise UsageError(f"{flag} {text.strip()!r} must be a positive whole number of MHz", example)
    return int(number)


# ---- order ----------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    cap_w: float | None
    repeat: int  # 0-based
    # Clock caps (--sm-clock/--mem-clock), MHz; None: the GPU's own clocks.
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    point: tuple = ()  # --vary: ((param, value), ...) (launcher/sweep/grid.py); () without
    profile: str | None = None  # --power-profile; None: the GPU's own

    def describe(self) -> str:
        cap = "uncapped" if self.cap_w is None else f"cap {self.cap_w:g} W"
        where = "".join(f"{name} {value}, " for name, value in self.point)
        clocks = clock_label(self.sm_clock_mhz, self.mem_clock_mhz)
        profile = f", profile {self.profile}" if self.profile else ""
        return f"{where}{cap}{', ' + clocks if clocks else ''}{profile}, repeat {self.repeat + 1}"


def point_of(sweep: dict) -> tuple:
    """A result's grid point, as its spec.sweep stores it ([[param, value], ...])."""
    return tuple((str(n), v) for n, v in (sweep.get("point") or []))


def _point_key(point):
    return tuple((v is None, v or 0.0) for v in point)


def schedule(caps: list[float | None], repeats: int, order: str, seed: int,
             sm_clocks: list[int | None] | None = None,
             mem_clocks: list[int | None] | None = None,
             points: list[tuple] | None = None,
             profiles: list[str | None] | None = None) -> list[Slot]:
    """Every cap (x SM clock x memory clock, at every --vary grid point) once per
    round, rounds one after another.

    shuffle: each round in its own random order from `seed`; alternate: low,
    high, next-low, next-high, ..., reversed every other round; ascending:
    low to high every round (heat builds up towards the high caps: biased).
    Without clocks the order is the one a caps-only sweep always had.
    """
    if order not in ORDERS:
        raise UsageError(f"unknown order {order!r}", f"choose one of: {', '.join(ORDERS)}")
    if repeats < 1:
        raise UsageError("--repeat must be at least 1", f"got {repeats}")
    settings = [(c, s, m, p) for c in caps for s in (sm_clocks or [None])
                for m in (mem_clocks or [None]) for p in (profiles or [None])]
    # Grid points outermost, so that a plain cap sweep's order is unchanged.
    combos = [(p, setting) for p in (points or [()])
              for setting in sorted(settings, key=_point_key)]
    if len(combos) * repeats > MAX_SLOTS:  # before any slot is made (--repeat 10**20)
        raise UsageError(f"the sweep has {len(combos) * repeats} runs ({len(combos)} setting(s) x "
                         f"--repeat {repeats})", f"use at most {MAX_SLOTS}")
    rng = random.Random(seed)
    slots: list[Slot] = []
    for r in range(repeats):
        if order == "shuffle":
            round_points = list(combos)
            rng.shuffle(round_points)
        elif order == "alternate":
            round_points = _low_high(combos)
            if r % 2:
                round_points.reverse()
        else:
            round_points = list(combos)
        slots.extend(Slot(c, r, s, m, point=p, profile=pr) for p, (c, s, m, pr) in round_points)
    if len(slots) > MAX_SLOTS:
        raise UsageError(f"the sweep has {len(slots)} runs", f"use at most {MAX_SLOTS}")
    return slots


def _low_high(caps: list) -> list:
    out, lo, hi = [], 0, len(caps) - 1
    while lo <= hi:
        out.append(caps[lo])
        if hi != lo:
            out.append(caps[hi])
        lo, hi = lo + 1, hi - 1
    return out


def new_seed() -> int:
    return random.SystemRandom().randrange(1, 2**31)


# ---- identity ---------------------------------------------------------------
def measurement_key(spec: dict) -> dict:
    """What must match for two runs to belong to one sweep (everything but the cap)."""
    power = spec["power"]
    return {
        "host": _host(),
        "workload": spec["workload"], "impl": spec.get("impl"), "preset": spec["preset"],
        "params": spec["params"], "devices": spec["devices"],
        # The stall timeout says when to give up on a run, not what it measures.
        "protocol": {k: v for k, v in spec["protocol"].items() if k != "stall_timeout_s"},
        "power": {k: power.get(k) for k in ("method", "cap_tolerance_frac", "node_overhead_w")},
        "site": (spec.get("site") or {}).get("name"), "runtime": spec.get("runtime"),
        "seed": spec.get("seed"),
    }


def key_hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def sweep_id(spec: dict, digest: str) -> str:
    return f"sweep-{_host()}-{spec['workload']}-{spec['preset']}-{digest}"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])


# ---- what is already done ----------------------------------------------------
def doc_slot(spec: dict, repeat) -> Slot:
    """The slot a run's spec fills: its cap, clock caps (spec.power.clocks), repeat and grid point."""
    clocks = spec["power"].get("clocks") or {}
    return Slot(spec["power"]["cap_w"], int(repeat), clocks.get("sm_mhz"), clocks.get("mem_mhz"),
                point=point_of(spec.get("sweep") or {}), profile=spec["power"].get("profile"))


def run_slot(run: dict) -> Slot:
    """The slot of a sweep.json run entry (entries without clocks: none were capped)."""
    return Slot(run["cap_w"], run["repeat"], run.get("sm_clock_mhz"), run.get("mem_clock_mhz"),
                point=tuple((run.get("point") or {}).items()), profile=run.get("power_profile"))


def completed_slots(sweep_dir: Path, digest: str) -> dict[Slot, str]:
    """Slots with a result of this sweep that counts: schema-valid, `complete`,
    finished by its launcher, no failed validity check, and trusted (launcher/
    site/trust.py): slot -> run id. Any other attempt stays in its folder, beside the
    one that measures the slot again."""
    from hpcai.launcher.run.results import validation_errors
    from hpcai.launcher.site.trust import HOW_TO_TRUST, untrusted

    done: dict[Slot, str] = {}
    distrusted = []
    for path in sorted(Path(sweep_dir).glob("*/result.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("status") != "complete":
            continue
        sweep = (doc.get("spec") or {}).get("sweep") or {}
        if sweep.get("key") != digest or validation_errors(doc) or not counts_as_done(doc):
            continue
        why = untrusted(path)
        if why:
            distrusted.append(why)
            continue
        done.setdefault(doc_slot(doc["spec"], sweep["repeat"]), doc["run_id"])
    if distrusted:
        log(f"{len(distrusted)} complete result(s) not trusted, measured again: "
            f"{distrusted[0]}{' ...' if len(distrusted) > 1 else ''}; {HOW_TO_TRUST}")
    return done


def counts_as_done(doc: dict) -> bool:
    """A complete result the report would count: its launcher finished it, and no
    validity check failed (such a slot is measured again on resume)."""
    from hpcai.measure.validity import failed_checks

    return isinstance(doc.get("launcher"), dict) and not failed_checks(doc.get("validity"))


def attempts(sweep_dir: Path, digest: str) -> dict[Slot, list[dict]]:
    """Every run folder of this sweep, complete or not, per slot."""
    found: dict[Slot, list[dict]] = {}
    for path in sorted(Path(sweep_dir).glob("*/result.json")):
        try:
            doc = json.loads(path.read_text())
            sweep = doc["spec"]["sweep"]
            if sweep.get("key") != digest:
                continue
            slot = doc_slot(doc["spec"], sweep["repeat"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        entry = {"run_id": doc.get("run_id"), "status": doc.get("status")}
        failed = _failed_check_names(doc)
        if failed:
            entry["failed_checks"] = failed
        found.setdefault(slot, []).append(entry)
    return found


def _failed_check_names(doc: dict) -> list[str]:
    from hpcai.measure.validity import failed_checks

    validity = doc.get("validity") if isinstance(doc.get("validity"), dict) else None
    return list(dict.fromkeys(c.get("name", "?") for c in failed_checks(validity)))


# ---- the idle baseline ----------------------------------------------------------
def measure_idle(vendor: str, gpu_indices: list[int] | None, seconds: float,
                 interval_s: float, node_power: dict | None = None) -> dict:
    """Power drawn with nothing running, once per sweep, through the same sampler;
    node_power: the site's [node_power], whose sources are read beside the GPUs."""
    from hpcai.measure.power_sources import discover
    from hpcai.measure.telemetry import Sampler

    if seconds <= 0:
        return {"available": False, "reason": "skipped (--idle-s 0)", "seconds": 0}
    discovery = discover(vendor)
    try:
        if discovery.kind is None:
            return {"available": False, "reason": discovery.reason, "seconds": 0}
        names, sources, uuids = [], [], []
        if discovery.kind == "gpu":
            for device in discovery.gpus:
                info = device.info()
                if gpu_indices is None or info.index in gpu_indices:
                    names.append({"index": info.index, "name": info.name})
                    sources.append(device)
                    uuids.append((info.index, info.uuid))
        else:
            for domain in discovery.rapl:
                names.append({"index": None, "name": domain.name})
                sources.append(domain)
        sampler = Sampler(sources, interval_s)
        node = None
        if (node_power or {}).get("sources"):
            from hpcai.measure.node_power import NodePowerSampler

            node = NodePowerSampler(node_power)
            node._wall0, node._mono0 = sampler._wall0, sampler._mono0  # one clock
            node.start()
        held = _held_by_another_run(uuids)
        sampler.start()
        try:
            start = sampler.mark("idle-start")
            time.sleep(seconds)
            end = sampler.mark("idle-end")
        finally:
            sampler.stop()
            if node is not None:
                node.stop()
        held = held or _held_by_another_run(uuids)  # again after the wait
        devices = [_idle_device(sampler, i, who, start, end) for i, who in enumerate(names)]
        verdict = _idle_verdict(devices, held)
        baseline = {"available": verdict["available"], "source": discovery.kind,
                    "reason": verdict["reason"], "seconds": end.t - start.t,
                    "measured": now_iso(), "total_power_w": verdict["total_power_w"],
                    "devices": devices}
        if node is not None:
            summary = node.summary((start.t, end.t))
            baseline["node_power"] = {"sources": summary["sources"], "reasons": summary["reasons"]}
        return baseline
    finally:
        discovery.close()


# ---- the summary file -------------------------------------------------------------
def _idle_device(sampler, i: int, who: dict, start, end) -> dict:
    """One source's idle power: its energy counter's mean where it has one, else
    the samples' mean; its utilisation, to tell an idle GPU from a busy one."""
    from hpcai.measure.telemetry import window_stats

    stats = window_stats(sampler.series(i, start.t, end.t))
    # Utilisation is read once a second (telemetry.FULL_READ_S), so a short
    # baseline may hold no reading inside its marks: judge it on every one taken.
    everything = window_stats(sampler.series(i, float("-inf"), float("inf")))
    e0, e1 = start.energy_j[i], end.energy_j[i]
    counter_w = (e1 - e0) / (end.t - start.t) if e0 is not None and e1 is not None else None
    sampled = (stats["power_w"] or {}).get("mean")
    return {**who, "samples": stats["samples"], "power_w": stats["power_w"],
            "mean_power_w": counter_w if counter_w is not None else sampled,
            "utilization_pct_mean": everything.get("utilization_pct_mean")}


def _held_by_another_run(uuids: list[tuple[int, str | None]]) -> str | None:
    """Which GPU another run holds (the node's authority: launcher/power/authority.py),
    and by whom; None when none is held. A run's GPUs are loaded, whatever their
    utilisation read in a pause (loading data, compiling)."""
    from hpcai.launcher.power.authority import describe_holder, holder_of

    for index, uuid in uuids:
        holder = holder_of(uuid) if uuid else None
        if holder is not None:
            return f"GPU {index} was held by another run ({describe_holder(holder)})"
    return None


def _idle_verdict(devices: list[dict], held: str | None = None) -> dict:
    """The total idle power, and whether it counts (every source read, none busy, none
    held by another run)."""
    known = [d["mean_power_w"] for d in devices if d["mean_power_w"] is not None]
    total = sum(known) if known and len(known) == len(devices) else None
    busy = [f"GPU {d['index']} at {d['utilization_pct_mean']:.0f}%" for d in devices
            if (d.get("utilization_pct_mean") or 0) > IDLE_BUSY_PCT]
    reason = None if total is not None else "too few idle samples"
    if busy:
        reason = (f"the GPUs were not idle ({', '.join(busy)} utilisation, above "
                  f"{IDLE_BUSY_PCT:g}%): measured again when the sweep resumes")
    elif held:
        reason = f"the GPUs were not idle ({held}): measured again when the sweep resumes"
    return {"available": total is not None and not busy and not held, "reason": reason,
            "total_power_w": total}


class Summary:
    """`sweep.json`: the plan, the order, the idle baseline and every run's status."""

    def __init__(self, path: Path, doc: dict):
        self.path, self.doc = path, doc

    @classmethod
    def load(cls, path: Path) -> Summary | None:
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ResultError(f"{path} is not a readable sweep summary ({exc})",
                              "move it aside and run the sweep again") from None
        return cls(Path(path), doc)

    def write(self, quiet: bool = False) -> None:
        """quiet: on the way out of an error, say a failed write in one line and go on
        (the error being raised matters more; the summary keeps its last state)."""
        from hpcai.launcher.run.output_check import write_error
        from hpcai.workloads.result import write_json_atomic

        self.doc["updated"] = now_iso()
        try:
            write_json_atomic(self.path, self.doc)
        except OSError as exc:
            error = write_error(self.path.parent, exc, "the sweep summary",
                                "free space or make the folder writable, then run the "
                                "same command again")
            if not quiet:
                raise error from None
            log(f"{error.message}; {self.path} keeps its last state")

    def refresh_attempts(self) -> None:
        found = attempts(self.path.parent, self.doc["key"])
        for run in self.doc["runs"]:
            run["attempts"] = found.get(run_slot(run), [])

    def set_run(self, position: int, quiet: bool = False, **fields) -> None:
        self.doc["runs"][position].update(fields)
        self.doc["counts"] = _counts(self.doc["runs"])
        self.write(quiet)


def _counts(runs: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for run in runs:
        counts[run["status"]] = counts.get(run["status"], 0) + 1
    return counts


# ---- the sweep ----------------------------------------------------------------------
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
