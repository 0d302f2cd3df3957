"""`hpcai-launch fleet run --local`: every GPU of this node measured as its own
single-GPU run, all at once (as in production: shared power and cooling), each
with its own cap session, its selftest first.

Each GPU gets one launcher subprocess (`hpcai-launch WORKLOAD --cap LIST`,
an in-run sweep where the workload supports it) that sees only that GPU
(CUDA_/ROCR_VISIBLE_DEVICES) and keeps its own power journal, so the GPUs'
cap sessions never share a file. A unit already done is not measured again:
running the same command on the same folder resumes an interrupted campaign,
measuring only the caps a GPU still lacks.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.launcher.fleet.campaign import (
    FINAL_STATES,
    Campaign,
    Unit,
    campaign_doc,
    check_resumable,
    create_or_resume,
    node_name,
    read_json,
    safe_dir,
)
from hpcai.launcher.power.stale import pid_alive
from hpcai.launcher.cli.progress import Progress

from hpcai.errors import CapOutOfRangeError, DeviceError, UsageError

HPCAI = [sys.executable, "-m", "hpcai.launcher.cli"]
SELFTEST_CHECKS = "library,gpus,power"


@dataclass
class FleetRequest:
    workload: str
    caps: list
    output: str
    preset: str | None = None
    # Passed to each GPU's launcher as they are (None: its default).
    passthrough: dict = field(default_factory=dict)
    selftest_s: float = 5.0
    selftest: bool = True
    command: list = field(default_factory=list)

    def run_settings(self) -> dict:
        return {"passthrough": self.passthrough, "selftest": self.selftest,
                "selftest_s": self.selftest_s}


def _visible_gpus() -> list:
    """(GpuInfo, PowerLimits | None, workload id) for each GPU this node lets us use."""
    from hpcai.launcher.run.visibility import visible_gpus

    from hpcai.gpu import open_library

    library = open_library("auto")
    if library is None:
        return []
    try:
        devices = {d.info().uuid: d for d in library.devices()}
        picked = visible_gpus([d.info() for d in devices.values()])
        out = []
        for info, vid in picked:
            try:
                limits = devices[info.uuid].power_limits()
            except Exception:  # noqa: BLE001 (a GPU that cannot say is checked by its sweep)
                limits = None
            out.append((info, limits, vid))
        return out
    finally:
        library.close()


def check_caps(gpus: list, caps: list) -> None:
    """Every cap within every GPU's range, before any GPU is touched."""
    for info, limits, _ in gpus:
        if limits is None:
            continue
        for cap in caps:
            if cap is None:
                continue
            low, high = limits.min_w, limits.max_w
            if (low is not None and cap < low) or (high is not None and cap > high):
                raise CapOutOfRangeError(
                    f"cap {cap:g} W is outside GPU {info.index}'s range {low:g}-{high:g} W",
                    "give caps every GPU of the fleet accepts (hpcai-launch power show)")


def run_local(req: FleetRequest) -> int:
    fresh = campaign_doc(req.workload, req.preset, req.caps, "local", req.command,
                         req.run_settings())
    check_resumable(req.output, fresh)
    gpus = _visible_gpus()
    if not gpus:
        raise DeviceError("no GPU visible on this node",
                          "fleet run --local measures this node's GPUs: run it on a GPU node")
    check_caps(gpus, req.caps)
    campaign, resumed = create_or_resume(req.output, fresh)
    return measure_node(campaign, req, gpus, resumed)


def measure_node(campaign: Campaign, req: FleetRequest, gpus: list, resumed: bool) -> int:
    node = node_name()
    units = [_unit(campaign, node, info) for info, _, _ in gpus]
    busy = [u for u in units if u.state in ("selftest", "running") and pid_alive(u.doc.get("pid"))]
    if busy:
        raise UsageError(f"GPU {busy[0].index} of campaign {campaign.folder} is being measured "
                         f"by process {busy[0].doc['pid']} on {node}",
                         "wait for it (hpcai-launch fleet status) or stop it first")
    todo = [(u, info, vid) for u, (info, _, vid) in zip(units, gpus) if u.state not in FINAL_STATES]
    done = len(units) - len(todo)
    print(f"fleet {campaign.workload}: {'resuming' if resumed else 'campaign'} "
          f"{campaign.folder} on {node}: {len(todo)} GPU(s) to measure"
          + (f", {done} already done" if done else ""), flush=True)
    workers = [GpuWorker(campaign, req, u, info, vid) for u, info, vid in todo]
    previous = signal.getsignal(signal.SIGTERM)
    # Under Slurm, scancel signals every process of the step itself: only take note.
    forward = "SLURM_JOB_ID" not in os.environ
    signal.signal(signal.SIGTERM, lambda *_: [w.stop(forward) for w in workers])
    progress = Progress(f"fleet {campaign.workload}").start()
    try:
        threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
        for t in threads:
            t.start()
        progress.step(_states(workers))
        for t in threads:
            while t.is_alive():
                t.join(0.5)
                progress.update(_states(workers))
    finally:
        progress.stop()
        signal.signal(signal.SIGTERM, previous)
    for w in workers:
        print(f"  gpu{w.unit.index} {w.unit.uuid}: {w.unit.state}"
              + (f" ({w.unit.doc.get('reason')})" if w.unit.doc.get("reason") else ""))
    if any(w.stopped for w in workers):
        print(f"fleet: interrupted; run the same command again to resume {campaign.folder}")
        return 143
    return 0 if all(w.unit.state in FINAL_STATES for w in workers) else 1


def _states(workers: list) -> str:
    """"8 GPU(s): 2 selftest, 5 running, 1 done": where the node's GPUs are now."""
    counts: dict[str, int] = {}
    for w in workers:
        counts[w.unit.state] = counts.get(w.unit.state, 0) + 1
    return f"{len(workers)} GPU(s): " + ", ".join(f"{n} {state}" for state, n in counts.items())


def _unit(campaign: Campaign, node: str, info) -> Unit:
    folder = safe_dir(campaign.unit_dir(node, info.index), "unit folder")
    doc = read_json(folder / "unit.json")
    if doc and doc.get("uuid") not in (None, info.uuid):
        # Another GPU sits at this index now (replaced): the old unit is kept aside.
        folder.rename(folder.with_name(f"{folder.name}-replaced-{doc['uuid']}"))
        folder = safe_dir(folder, "unit folder")
        doc = None
    unit = Unit(folder, doc or {"kind": "hpcai.fleet.unit", "format": 1, "node": node,
                               "index": info.index, "uuid": info.uuid, "name": info.name,
                               "pci_bus_id": info.pci_bus_id, "serial": info.serial,
                               "state": "pending", "created": now_iso()})
    if doc is None:
        unit.save()
    elif doc.get("serial") is None and info.serial is not None:
        unit.save(serial=info.serial)  # a campaign begun before serials were read
    return unit


def gpu_env(info, vid: str) -> dict:
    env = dict(os.environ)
    if info.vendor == "amd":
        for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
            env.pop(name, None)
        env["ROCR_VISIBLE_DEVICES"] = vid
    else:
        env["CUDA_VISIBLE_DEVICES"] = info.uuid
    return env


class GpuWorker:
    """One GPU: its selftest, then its sweep, its unit.json kept up to date."""

    def __init__(self, campaign: Campaign, req: FleetRequest, unit: Unit, info, vid: str):
        self.campaign, self.req, self.unit, self.info = campaign, req, unit, info
        self.env = gpu_env(info, vid)
        self.proc: subprocess.Popen | None = None
        self.stopped = False
        self.lock = threading.Lock()

    def stop(self, forward: bool = True) -> None:
        with self.lock:
            self.stopped = True
            if forward and self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)  # it restores its caps itself

    def _call(self, args: list[str], log: Path) -> int:
        with self.lock:
            if self.stopped:
                return 143
            with log.open("a") as out:
                self.proc = subprocess.Popen([*HPCAI, *args], env=self.env, stdout=out,
                                             stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)
        return self.proc.wait()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 (one GPU's failure must not hide the others')
            self.unit.save(state="failed", reason=f"{type(exc).__name__}: {exc}", pid=None)

    def _run(self) -> None:
        unit, folder = self.unit, self.unit.folder
        if self.req.selftest and not (unit.doc.get("selftest") or {}).get("verdict") == "ok":
            unit.save(state="selftest", pid=os.getpid(), started=now_iso())
            verdict = self.selftest()
            unit.save(selftest=verdict)
            if verdict["verdict"] != "ok":
                unit.save(state="interrupted" if self.stopped else "selftest_failed",
                          reason=verdict["reason"], pid=None)
                return
        caps = self.missing_caps()
        unit.save(state="running", pid=os.getpid(), caps_to_measure=caps, reason=None,
                  attempts=int(unit.doc.get("attempts", 0)) + 1)
        args = [self.campaign.workload, "--cap", ",".join(f"{c:g}" for c in caps),
                "-o", str(folder / "runs"), "--journal", str(self.journal())]
        if self.req.preset:
            args += ["--preset", self.req.preset]
        for flag, value in self.req.passthrough.items():
            if value is True:
                args.append(flag)
            elif value not in (None, False):
                args += [flag, str(value)]
        code = self._call(args, folder / "launcher.log")
        still = self.missing_caps()
        if self.stopped:
            unit.save(state="interrupted", reason="stopped (SIGTERM)", pid=None)
        elif not still:
            # Measured at every cap. A launcher exit 3 (a slot complete but failing a
            # validity check: a throttling GPU) is the fleet report's to judge, not a failure.
            unit.save(state="done", reason=None, pid=None, finished=now_iso(), launcher_exit=code)
        else:
            unit.save(state="failed", pid=None,
                      reason=f"exit {code}, no complete result at "
                             f"{', '.join(f'{c:g} W' for c in still) or 'every cap'}; see "
                             f"{folder / 'launcher.log'}")

    def missing_caps(self) -> list:
        from hpcai.launcher.fleet.records import unit_record

        have = unit_record(self.unit, self.campaign.workload, str(self.campaign.folder)).caps
        return [c for c in self.campaign.caps if c not in have]

    def journal(self) -> Path:
        """This GPU's own power journal, beside the launcher's default one."""
        from hpcai.launcher.power.journal import default_journal_path

        base = default_journal_path()
        return base.with_name(f"{base.stem}-fleet-{self.unit.node}-gpu{self.info.index}.json")

    def selftest(self) -> dict:
        path = self.unit.folder / "selftest.json"
        path.unlink(missing_ok=True)
        code = self._call(["selftest", "--only", SELFTEST_CHECKS, "--load-s",
                           f"{self.req.selftest_s:g}", "--journal", str(self.journal()),
                           "-o", str(path)], self.unit.folder / "selftest.log")
        doc = read_json(path) or {}
        failed = [c for c in doc.get("checks") or [] if c.get("status") == "FAIL"]
        if failed:
            c = failed[0]
            return {"verdict": "FAIL", "exit_code": code,
                    "reason": f"{c.get('check')}: {c.get('item')}: {c.get('value')}",
                    "failed": len(failed)}
        if code != 0 or not doc:
            return {"verdict": "FAIL", "exit_code": code,
                    "reason": f"selftest exited {code} without a verdict; see selftest.log"}
        return {"verdict": "ok", "exit_code": code, "reason": None,
                "summary": doc.get("summary")}
