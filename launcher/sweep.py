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

from hpcai.errors import HpcaiError, Interrupted, ResultError, UsageError, WorkloadError
from hpcai.signals import install_signal_handlers

SUMMARY_FILE = "sweep.json"
SUMMARY_VERSION = 1
ORDERS = ("shuffle", "alternate", "ascending")
MAX_SLOTS = 200  # a typo in a range should not start a week of runs
IDLE_BASELINE_S = 5.0
# A GPU busier than this (mean utilisation, %) while the idle baseline is taken
# runs someone's work: the baseline is recorded invalid and taken again on resume.
IDLE_BUSY_PCT = 5.0


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
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_SLOTS:
        raise UsageError(f"range {text!r} gives {count} caps", "use a larger step")
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
    point: tuple = ()  # --vary: ((param, value), ...) (launcher/grid.py); () without

    def describe(self) -> str:
        cap = "no cap" if self.cap_w is None else f"cap {self.cap_w:g} W"
        where = "".join(f"{name} {value}, " for name, value in self.point)
        clocks = clock_label(self.sm_clock_mhz, self.mem_clock_mhz)
        return f"{where}{cap}{', ' + clocks if clocks else ''}, repeat {self.repeat + 1}"


def clock_label(sm_mhz: int | None, mem_mhz: int | None) -> str:
    """"SM 1410 MHz, memory 2619 MHz"; "" without clock caps."""
    parts = [f"{name} {mhz} MHz" for name, mhz in (("SM", sm_mhz), ("memory", mem_mhz))
             if mhz is not None]
    return ", ".join(parts)


def point_of(sweep: dict) -> tuple:
    """A result's grid point, as its spec.sweep stores it ([[param, value], ...])."""
    return tuple((str(n), v) for n, v in (sweep.get("point") or []))


def _point_key(point):
    return tuple((v is None, v or 0.0) for v in point)


def schedule(caps: list[float | None], repeats: int, order: str, seed: int,
             sm_clocks: list[int | None] | None = None,
             mem_clocks: list[int | None] | None = None,
             points: list[tuple] | None = None) -> list[Slot]:
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
    settings = [(c, s, m) for c in caps for s in (sm_clocks or [None])
                for m in (mem_clocks or [None])]
    # Grid points outermost, so that a plain cap sweep's order is unchanged.
    combos = [(p, setting) for p in (points or [()])
              for setting in sorted(settings, key=_point_key)]
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
        slots.extend(Slot(c, r, s, m, point=p) for p, (c, s, m) in round_points)
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
        "params": spec["params"], "protocol": spec["protocol"], "devices": spec["devices"],
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
                point=point_of(spec.get("sweep") or {}))


def run_slot(run: dict) -> Slot:
    """The slot of a sweep.json run entry (entries without clocks: none were capped)."""
    return Slot(run["cap_w"], run["repeat"], run.get("sm_clock_mhz"), run.get("mem_clock_mhz"),
                point=tuple((run.get("point") or {}).items()))


def completed_slots(sweep_dir: Path, digest: str) -> dict[Slot, str]:
    """Slots with a schema-valid `complete` result of this sweep: slot -> run id."""
    from hpcai.launcher.results import validation_errors

    done: dict[Slot, str] = {}
    for path in sorted(Path(sweep_dir).glob("*/result.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("status") != "complete":
            continue
        sweep = (doc.get("spec") or {}).get("sweep") or {}
        if sweep.get("key") != digest or validation_errors(doc):
            continue
        done.setdefault(doc_slot(doc["spec"], sweep["repeat"]), doc["run_id"])
    return done


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
        found.setdefault(slot, []).append({"run_id": doc.get("run_id"),
                                           "status": doc.get("status")})
    return found


# ---- the idle baseline ----------------------------------------------------------
def measure_idle(vendor: str, gpu_indices: list[int] | None, seconds: float,
                 interval_s: float, node_power: dict | None = None) -> dict:
    """Power drawn with nothing running, once per sweep, through the same sampler;
    node_power: the site's [node_power], whose sources are read beside the GPUs."""
    from hpcai.measure.power_sources import discover
    from hpcai.measure.telemetry import Sampler, window_stats

    if seconds <= 0:
        return {"available": False, "reason": "skipped (--idle-s 0)", "seconds": 0}
    discovery = discover(vendor)
    try:
        if discovery.kind is None:
            return {"available": False, "reason": discovery.reason, "seconds": 0}
        names, sources = [], []
        if discovery.kind == "gpu":
            for device in discovery.gpus:
                info = device.info()
                if gpu_indices is None or info.index in gpu_indices:
                    names.append({"index": info.index, "name": info.name})
                    sources.append(device)
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
        sampler.start()
        try:
            start = sampler.mark("idle-start")
            time.sleep(seconds)
            end = sampler.mark("idle-end")
        finally:
            sampler.stop()
            if node is not None:
                node.stop()
        devices = []
        for i, who in enumerate(names):
            stats = window_stats(sampler.series(i, start.t, end.t))
            # Utilisation is read once a second (telemetry.FULL_READ_S), so a short
            # baseline may hold no reading inside its marks: judge it on every one taken.
            everything = window_stats(sampler.series(i, float("-inf"), float("inf")))
            e0, e1 = start.energy_j[i], end.energy_j[i]
            counter_w = (e1 - e0) / (end.t - start.t) if e0 is not None and e1 is not None else None
            sampled = (stats["power_w"] or {}).get("mean")
            devices.append({**who, "samples": stats["samples"], "power_w": stats["power_w"],
                            "mean_power_w": counter_w if counter_w is not None else sampled,
                            "utilization_pct_mean": everything.get("utilization_pct_mean")})
        known = [d["mean_power_w"] for d in devices if d["mean_power_w"] is not None]
        total = sum(known) if known and len(known) == len(devices) else None
        busy = [f"GPU {d['index']} at {d['utilization_pct_mean']:.0f}%" for d in devices
                if (d.get("utilization_pct_mean") or 0) > IDLE_BUSY_PCT]
        reason = None if total is not None else "too few idle samples"
        if busy:
            reason = (f"the GPUs were not idle ({', '.join(busy)} utilisation, above "
                      f"{IDLE_BUSY_PCT:g}%): measured again when the sweep resumes")
        baseline = {"available": total is not None and not busy, "source": discovery.kind,
                    "reason": reason,
                    "seconds": end.t - start.t, "measured": _now_iso(),
                    "total_power_w": total, "devices": devices}
        if node is not None:
            summary = node.summary((start.t, end.t))
            baseline["node_power"] = {"sources": summary["sources"], "reasons": summary["reasons"]}
        return baseline
    finally:
        discovery.close()


# ---- the summary file -------------------------------------------------------------
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
        from hpcai.launcher.output_check import write_error
        from hpcai.workloads.result import write_json_atomic

        self.doc["updated"] = _now_iso()
        try:
            write_json_atomic(self.path, self.doc)
        except OSError as exc:
            error = write_error(self.path.parent, exc, "the sweep summary",
                                "free space or make the folder writable, then run the "
                                "same command again")
            if not quiet:
                raise error from None
            from hpcai.launcher.run import log

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


def _now_iso() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---- the sweep ----------------------------------------------------------------------
def run_sweep(opts) -> int:
    """Check everything, then one execute() per slot; limits restored after each."""
    from hpcai.launcher import inrun, runtime
    from hpcai.launcher import run as R
    from hpcai.measure.adaptive import SWEEP_CI_TARGET
    from hpcai.workloads.catalog import get_workload

    from hpcai.launcher import grid

    caps = list(opts.caps) if opts.caps else [None]
    inrun.check_request(opts.in_run, caps, other_axes=_other_axes(opts))
    if opts.protocol.get("ci_target") is None:  # sweeps measure adaptively by default
        opts = dataclasses.replace(opts, protocol={**opts.protocol, "ci_target": SWEEP_CI_TARGET})
    in_run = inrun.choose(opts, R.log, other_axes=_other_axes(opts))
    sm_clocks = list(opts.sm_clocks) if opts.sm_clocks else [None]
    mem_clocks = list(opts.mem_clocks) if opts.mem_clocks else [None]
    points = grid.points(opts.vary or [])
    device = None
    if opts.vary:  # a CPU run's `gpus` are its processes: the device decides
        device = R.plan(dataclasses.replace(opts, cap_w=None, caps=None, sm_clocks=None,
                                            mem_clocks=None))[0]["devices"]["type"]
    spec, _command, site, node = R.plan(_slot_options(
        grid.apply(opts, points[0], device), Slot(caps[0], 0, sm_clocks[0], mem_clocks[0])))
    if caps[0] is not None and not node.gpus:  # only a dry run gets here (plan refuses)
        R.log(R.caps_unchecked_note(spec))
    elif caps[0] is not None:
        from hpcai.launcher.power import make_backend

        with make_backend(spec["power"]["method"], node.vendor, site["power"]["command"]) as backend:
            for cap in caps:  # every cap checked before the first one is set
                R.check_cap(backend, cap, spec["devices"]["gpu_indices"], site)
    if node.gpus and (sm_clocks[0] is not None or mem_clocks[0] is not None):
        for sm in sm_clocks:  # every clock, too
            for mem in mem_clocks:
                R.check_clock_caps(spec, node, site, sm, mem)
    key = measurement_key(spec)
    if opts.vary:  # the first point's values are in the spec; the grid names them all
        key["vary"] = [[name, values] for name, values in opts.vary]
    if in_run:  # its own sweep folder: comparable in one report, never mixed in one sweep
        key["mode"] = "in-run"
    digest = key_hash(key)
    sweep_dir = Path(spec["output_dir"]).parent / sweep_id(spec, digest)
    summary_path = sweep_dir / SUMMARY_FILE
    previous = Summary.load(summary_path) if summary_path.exists() else None
    seed = opts.seed if opts.seed is not None else (
        previous.doc.get("seed") if previous else new_seed())
    slots = schedule(caps, opts.repeat, opts.order, seed, sm_clocks, mem_clocks, points)
    done = completed_slots(sweep_dir, digest) if sweep_dir.exists() else {}
    if opts.dry_run:
        print(json.dumps({"sweep_id": sweep_dir.name, "folder": str(sweep_dir), "seed": seed,
                          "order": opts.order, "in_run": in_run,
                          **({"vary": dict(opts.vary)} if opts.vary else {}), "runs": [
                              {**({"point": dict(s.point)} if s.point else {}),
                               "cap_w": s.cap_w, **_clock_fields(s), "repeat": s.repeat,
                               "status": "complete" if s in done else "to run"} for s in slots]},
                         indent=2))
        commands = [R.plan(dataclasses.replace(
                        _slot_options(grid.apply(opts, point, device), slots[0]),
                        output=str(sweep_dir)))[1]
                    for point in points]  # every point planned: a bad one is refused now
        first = commands[points.index(slots[0].point)]
        print("command of the first run: " + " ".join(first))
        return 0
    # Journal, free space, output: all before the idle baseline measures anything.
    if opts.vary:  # every point planned before anything runs: a bad one is refused now
        for point in points[1:]:
            other = R.plan(_slot_options(grid.apply(opts, point, device),
                                         Slot(caps[0], 0, sm_clocks[0], mem_clocks[0])))[0]
            if caps[0] is not None and node.gpus:  # and every cap on every point's GPUs
                from hpcai.launcher.power import make_backend

                with make_backend(spec["power"]["method"], node.vendor,
                                  site["power"]["command"]) as backend:
                    for cap in caps:
                        R.check_cap(backend, cap, other["devices"]["gpu_indices"], site)
    R.preflight(site, node, opts, sweep_dir)
    runtime.check_ready(spec, get_workload(spec["workload"]).impl(spec["impl"]).framework)
    tried = attempts(sweep_dir, digest)
    summary = Summary(summary_path, {
        "kind": "hpcai.sweep", "sweep_version": SUMMARY_VERSION, "sweep_id": sweep_dir.name,
        "key": digest, "measurement": key, "workload": spec["workload"],
        "preset": spec["preset"], "caps_w": caps, **_clock_axes(sm_clocks, mem_clocks),
        "repeat": opts.repeat, "order": opts.order, "in_run": in_run,
        **({"vary": [[name, values] for name, values in opts.vary]} if opts.vary else {}),
        "seed": seed, "created": previous.doc.get("created") if previous else _now_iso(),
        "idle_baseline": previous.doc.get("idle_baseline") if previous else None,
        "status": "running",
        "runs": [{"position": i, **({"point": dict(s.point)} if s.point else {}),
                  "cap_w": s.cap_w, **_clock_fields(s), "repeat": s.repeat,
                  "status": "complete" if s in done else "pending",
                  "run_id": done.get(s), "skipped": s in done,
                  "result": f"{done[s]}/result.json" if s in done else None,
                  "message": "already complete" if s in done else None,
                  "attempts": tried.get(s, [])} for i, s in enumerate(slots)],
    })
    summary.doc["counts"] = _counts(summary.doc["runs"])
    todo = [i for i, s in enumerate(slots) if s not in done]
    R.log(f"sweep {sweep_dir.name}: {len(slots)} run(s), {len(slots) - len(todo)} already "
          f"complete, order {opts.order} (seed {seed}); summary in {summary_path}")
    summary.write()
    try:
        # Signals between runs, too, end the sweep with an honest summary.
        with install_signal_handlers():
            if todo and not (summary.doc["idle_baseline"] or {}).get("available"):
                # Before the first run, while the GPUs are idle and at their own limits.
                summary.doc["idle_baseline"] = measure_idle(
                    spec["devices"]["vendor"], spec["devices"]["gpu_indices"], opts.idle_s,
                    float(spec["protocol"]["sample_interval_s"]), spec.get("node_power"))
                _log_idle(summary.doc["idle_baseline"])
                summary.write()
            if in_run and todo:
                inrun.run(R, opts, slots, todo, digest, sweep_dir, seed, summary)
            for i in [] if in_run else todo:
                _run_slot(R, grid.apply(opts, slots[i].point, device), slots[i], i, len(slots),
                          digest, sweep_dir, seed, summary)
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
    return _finish(summary)


def _run_slot(R, opts, slot: Slot, position: int, total: int, digest: str, sweep_dir: Path,
              seed: int, summary: Summary) -> None:
    spec, command, site, node = R.plan(dataclasses.replace(
        _slot_options(opts, slot), output=str(sweep_dir)))
    spec["sweep"] = {"id": sweep_dir.name, "key": digest, "position": position,
                     "repeat": slot.repeat, "repeats": opts.repeat, "order": opts.order,
                     "seed": seed}
    if slot.point:
        spec["sweep"]["point"] = [[name, value] for name, value in slot.point]
    R.log(f"sweep run {position + 1}/{total}: {slot.describe()}")
    summary.set_run(position, status="running", run_id=spec["run_id"], skipped=False,
                    result=f"{spec['run_id']}/result.json", message=None)
    try:
        R.execute(spec, command, site, node, opts)
    except (WorkloadError, ResultError) as exc:
        # This run failed; the others may still work (another cap, a transient error).
        status = _result_status(sweep_dir / spec["run_id"] / "result.json")
        summary.set_run(position, status=status, message=exc.one_line())
        R.log(f"sweep run {position + 1}/{total} {status}: {exc.one_line()}; continuing")
        return
    except (Interrupted, KeyboardInterrupt) as exc:
        why = exc.one_line() if isinstance(exc, Interrupted) else "interrupted by SIGINT"
        summary.set_run(position, quiet=True, status="interrupted", message=why)
        raise
    except HpcaiError as exc:  # power or configuration trouble: stop the sweep
        summary.set_run(position, quiet=True, status="failed", message=exc.one_line())
        raise
    summary.set_run(position, status="complete")


def _slot_options(opts, slot: Slot):
    """The options of one plain run: this slot's cap and clocks, no sweep lists."""
    return dataclasses.replace(opts, cap_w=slot.cap_w, caps=None,
                               sm_clock_mhz=slot.sm_clock_mhz, mem_clock_mhz=slot.mem_clock_mhz,
                               sm_clocks=None, mem_clocks=None)


def _clock_fields(slot: Slot) -> dict:
    """A run entry's clock caps; none without them (summaries stay as they were)."""
    return {k: v for k, v in (("sm_clock_mhz", slot.sm_clock_mhz),
                              ("mem_clock_mhz", slot.mem_clock_mhz)) if v is not None}


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
    return None


def _result_status(path: Path) -> str:
    try:
        status = json.loads(path.read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return "failed"
    return status if status in ("failed", "interrupted") else "failed"


def _log_idle(baseline: dict) -> None:
    from hpcai.launcher.run import log

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
        cap = "no cap" if r["cap_w"] is None else f"{r['cap_w']:g} W"
        clocks = clock_label(r.get("sm_clock_mhz"), r.get("mem_clock_mhz"))
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
