"""One workload process and everything held while it runs: the power backend,
the cap and clock sessions, the lifeline, the log follower, the signals to the
child; and `finish_result`, the launcher's one way to complete a result.

Order matters for safety: the limits come back as soon as the workload has
exited, on every path (the ExitStack unwinds the cap session first).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from hpcai.errors import Interrupted
from hpcai.launcher.run import output_check
from hpcai.launcher.run import results
from hpcai.launcher.run import runtime
from hpcai.launcher.run.lifeline import Lifeline
from hpcai.launcher.run.options import log
from hpcai.launcher.run.plan import RunPlan, clock_label
from hpcai.launcher.run.workload_log import LogFollower
from hpcai.signals import install_signal_handlers
from hpcai.spec import RunSpec

CHILD_GRACE_S = 30  # after a forwarded signal, before the workload is killed
# Under Slurm the caps must be back before its SIGKILL, KillWait after the SIGTERM
# (30 s by default): the workload gets at most 20 s, and 10 s stay for the restore.
SLURM_CHILD_GRACE_S = 20
CAP_RESTORE_RESERVE_S = 10
ORPHAN_WAIT_S = 5  # then, caps restored, for workers that outlived torchrun
POLL_S = 0.05


class WorkloadProcess:
    """A context manager: entering it sets the plan's limits (cap, then clocks);
    leaving it stops the log follower, drops the lifeline and restores them.

        with WorkloadProcess(run) as proc:
            ...first write of the run folder...
            proc.attach()        # lifeline and log follower
            proc.run()           # start, wait (interrupts noted in proc.interrupted)
    """

    def __init__(self, plan: RunPlan, cap_note: str = "; it is restored when the run ends"):
        self.plan, self.spec = plan, plan.spec
        self.run_dir = Path(plan.spec.output_dir)
        self.indices = plan.indices
        self.cap_note = cap_note
        self.env = runtime.environment(plan.spec, plan.site)
        self.signals = ChildSignals(plan.spec)
        self.backend = self.session = self.clock_session = self.profile_session = None
        self.follower: LogFollower | None = None
        self.child: subprocess.Popen | None = None
        self.interrupted: Interrupted | None = None
        from hpcai.launcher.run.stall import StallWatchdog

        self.watchdog = StallWatchdog(self.run_dir, plan.spec.protocol.get("stall_timeout_s"))
        self.stalled: str | None = None  # why the watchdog ended the run
        self.outlived: list[dict] = []  # processes that outlived the workload (stall.end_every_rank)
        self._stack = contextlib.ExitStack()

    # ---- limits -------------------------------------------------------------------
    def __enter__(self) -> "WorkloadProcess":
        self._stack.__enter__()
        try:
            self._stack.enter_context(install_signal_handlers(self.signals.forward))
            if self.plan.node.gpus:
                self._hold_limits()
        except BaseException:
            self._stack.close()
            raise
        return self

    def _hold_limits(self) -> None:
        from hpcai.launcher.power import CapSession
        from hpcai.launcher.power.clocks import ClockSession

        cap_w = self.spec.power.cap_w
        clocks = self.spec.power.clocks.to_json() if self.spec.power.clocks else {}
        profile = self.spec.power.profile or None
        self.backend = self.plan.backend()
        self._stack.callback(self.backend.close)
        # Entered last, so it exits first: limits come back before anything else.
        self.session = self._stack.enter_context(
            CapSession(self.backend, cap_w, self.indices, self.plan.journal,
                       run_id=self.spec.run_id, hold=bool(clocks) or profile is not None,
                       wait_s=self.plan.wait_for_gpus_s, on_wait=log))
        gpus = ", ".join(map(str, self.indices))
        if cap_w is not None:
            log(f"power limit set to {cap_w:g} W on GPU(s) {gpus}{self.cap_note}")
        if clocks:  # entered after the cap, so restored before it
            self.clock_session = self._stack.enter_context(ClockSession(
                self.backend, clocks.get("sm_mhz"), clocks.get("mem_mhz"), self.indices,
                self.plan.journal))
            log(f"clocks capped ({clock_label(clocks.get('sm_mhz'), clocks.get('mem_mhz'))}) "
                f"on GPU(s) {gpus}; restored when the run ends")
        if profile is not None:  # entered last, so restored first
            from hpcai.launcher.power.profiles import ProfileSession

            self.profile_session = self._stack.enter_context(ProfileSession(
                self.backend, profile, self.indices, self.plan.journal))
            log(f"power profile {profile} requested on GPU(s) {gpus}; restored when the run ends")

    def __exit__(self, *exc_info) -> bool:
        suppressed = self._stack.__exit__(*exc_info)
        if exc_info[0] is None:
            if self.session is not None and self.session.cap_w is not None:
                log("power limits restored")
            if self.clock_session is not None:
                log("clocks restored")
            if self.profile_session is not None:
                log("power profiles restored")
        return suppressed

    @property
    def limits(self) -> dict[int, dict]:
        """Each GPU's limits as the cap session set them (none without GPUs)."""
        return self.session.gpus if self.session is not None else {}

    def limits_now(self) -> dict[int, float | None]:
        return limits_in_force(self.backend, self.indices)

    # ---- the process ----------------------------------------------------------------
    def attach(self) -> None:
        """The lifeline (held until the workload has exited: if this launcher dies,
        the workload stops) and the follower of the workload's log."""
        lifeline = self._stack.enter_context(Lifeline(self.run_dir, self.spec.run_id))
        if lifeline.problem:
            log(f"no lifeline for the workload ({lifeline.problem}); "
                "if this launcher is killed, stop the workload by hand")
        container = self.spec.runtime["kind"] == "apptainer"
        self.env.update(lifeline.environment(container=container))
        # Entered after the lifeline, so it runs before the lifeline and the limits
        # go: no limit comes back while any rank of the run is alive.
        self._stack.callback(self._end_every_rank)
        progress = self.watchdog.prepare()
        if self.watchdog.problem:
            log(f"no stall watchdog ({self.watchdog.problem})")
        self._stack.callback(self.watchdog.close)
        self.env.update(progress)
        if container:
            self.env.update({f"APPTAINERENV_{k}": v for k, v in progress.items()})
        self.follower = LogFollower(self.run_dir)
        self._stack.callback(self.follower.stop)
        if self.spec.runtime["kind"] == "apptainer":
            image = self.spec.runtime["image"]
            log(f"runtime: apptainer, image {image['path']} (sha256 {image['sha256'][:12]})")

    def run(self, poll=None) -> None:
        """Start the workload and wait for it, calling `poll()` meanwhile if given.
        A signal (or Ctrl-C) stops it and is kept in `interrupted`."""
        try:
            self.start()
            while self.child.poll() is None:
                if poll is not None:
                    poll()
                if self._stall_ended_run():
                    return
                time.sleep(POLL_S)
            if poll is not None:
                poll()  # a last request, made just before the workload exited
        except (Interrupted, KeyboardInterrupt) as exc:
            self.interrupted = exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)
            self.stop(self.interrupted.signum)

    def _stall_ended_run(self) -> bool:
        """No step progress for the stall timeout: every rank stopped, the run failed."""
        from hpcai.launcher.run.stall import STALL_GRACE_S, end_every_rank

        reason = self.watchdog.stalled()
        if reason is None:
            return False
        self.stalled = reason
        log(f"{reason.split(';')[0]}: stopping every rank of the run")
        with contextlib.suppress(ProcessLookupError):
            self.child.send_signal(signal.SIGTERM)  # rank 0 may still write its result
        end_every_rank(self.child.pid, self.spec.run_id, exit_s=STALL_GRACE_S, term_s=2.0)
        self.child.wait()
        return True

    def _end_every_rank(self) -> None:
        """Before the limits come back: every process of the run gone (ranks in
        their own sessions included), given a moment to end by themselves."""
        from hpcai.launcher.run.stall import ORPHAN_EXIT_S, ORPHAN_EXIT_SLURM_S, end_every_rank

        if self.child is None:
            return
        wait_s = ORPHAN_EXIT_SLURM_S if self.signals.under_slurm else ORPHAN_EXIT_S
        end_every_rank(self.child.pid, self.spec.run_id, exit_s=wait_s, term_s=wait_s,
                       outlived=self.outlived)
        if self.outlived:
            log(f"{len(self.outlived)} process(es) outlived the workload and were stopped "
                f"(pid {', '.join(str(e['pid']) for e in self.outlived[:8])}): recorded in the result")

    def start(self) -> None:
        # Its own session: a terminal's Ctrl-C reaches the launcher alone, which
        # forwards it once, instead of hitting torchrun and its workers twice.
        from hpcai.launcher.run.stall import become_subreaper

        become_subreaper()  # the run's daemons stay in this launcher's process tree
        self.child = self.signals.child = start_workload(self.plan.command, self.env,
                                                         self.follower, self.run_dir)
        self.follower.start()
        self.watchdog.arm()
        if self.spec.power.cap_w is not None and self.session is not None:
            from hpcai.launcher.power.journal import record_workload

            record_workload(self.plan.journal, self.child.pid, self.spec.run_id)
        if self.clock_session is not None:
            from hpcai.launcher.power.clocks import record_clock_workload

            record_clock_workload(self.plan.journal, self.child.pid, self.spec.run_id)
        if self.profile_session is not None:
            from hpcai.launcher.power.profiles import record_profile_workload

            record_profile_workload(self.plan.journal, self.child.pid, self.spec.run_id)

    def stop(self, signum: int, already_sent: bool | None = None) -> None:
        self.signals.stop(signum, already_sent)

    @property
    def code(self) -> int | None:
        return self.child.returncode if self.child is not None else None


def start_workload(command: list[str], env: dict, follower: LogFollower, run_dir: Path):
    """The workload, its output into the run's log (never a pipe it could die of)."""
    try:
        with follower.open_for_workload() as sink:
            return subprocess.Popen(command, env=env, start_new_session=True,
                                    stdout=sink, stderr=sink)
    except OSError as exc:
        raise output_check.write_error(run_dir, exc, "the workload's log",
                                       "free space or make the folder writable") from None


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


def placeholder_result(spec: RunSpec) -> dict:
    """The result as it stands before the workload starts: `running`, no figures
    (the skeleton the workload's entrypoint fills, hpcai/result_document.py)."""
    from hpcai import result_document
    from hpcai.timestamps import now_iso
    from hpcai.workloads.catalog import get_workload

    unit = get_workload(spec.workload).unit
    return result_document.clean(result_document.skeleton(spec.to_json(), now_iso(), unit))


# ---- signals ----------------------------------------------------------------------
class ChildSignals:
    """A signal to the launcher while its workload runs: forwarded to the workload
    exactly once (torchrun abandons its workers' clean-up on a second one), and
    under Slurm only noted: Slurm signals every process of the step itself
    (scancel, time limit), so forwarding would make it a second signal."""

    def __init__(self, spec: RunSpec):
        self.under_slurm = bool(spec.slurm)
        self.grace_s = slurm_grace_s(spec.slurm.to_json().get("kill_wait_s")) \
            if self.under_slurm else CHILD_GRACE_S
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
            stop_child(self.child, signum, bool(self.forwarded) if already_sent is None
                       else already_sent, grace_s=self.grace_s)


def slurm_grace_s(kill_wait_s: int | None) -> float:
    """The workload's time to stop after Slurm's SIGTERM, leaving the cap restore
    its reserve before Slurm's SIGKILL (a site's KillWait may be short)."""
    if kill_wait_s is None:
        return SLURM_CHILD_GRACE_S
    return max(1.0, min(SLURM_CHILD_GRACE_S, kill_wait_s - CAP_RESTORE_RESERVE_S))


def stop_child(child: subprocess.Popen, signum: int, already_sent: bool,
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


def await_file(path: Path, seconds: float, done=None) -> None:
    """Under Slurm, torchrun may die of the second SIGTERM (srun forwards one
    after Slurm's own) while its workers are still writing: wait until the file
    exists and `done(path)` says it is final, or the time is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and (done is None or done(path)):
            return
        time.sleep(POLL_S if done is None else 0.2)


def result_is_final(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("status") != "running"
    except (OSError, ValueError):
        return False


# ---- the result ---------------------------------------------------------------------
def finish_result(doc: dict, run_dir: Path, spec: RunSpec, code: int | None, limits: dict,
                  end_limits: dict | None = None, interrupted: Interrupted | None = None,
                  clock_session=None, profile_session=None, outlived: list | None = None) -> dict:
    """The workload's result completed by the launcher, for a single run and an
    in-run segment alike: a `running` one marked interrupted or crashed, the limits
    set and in force, the clocks, the idle baseline, validity again; cleaned."""
    from hpcai.measure import validity
    from hpcai.result_document import clean

    if doc["status"] == "running":
        if interrupted is not None:
            results.mark_interrupted(doc, interrupted.one_line())
        else:
            results.mark_crashed(doc, code)
    results.apply_limits(doc, limits, spec.power.cap_w, float(spec.power.cap_tolerance_frac))
    if clock_session is not None:
        from hpcai.launcher.power.clocks import clocks_record

        doc["power"]["clocks"] = clocks_record(clock_session, measured_clocks(doc))
    if profile_session is not None:
        from hpcai.launcher.power.profiles import profile_record

        doc["power"]["profile"] = profile_record(profile_session)
    _judge_tier(doc, spec)
    doc["launcher"] = {"command_exit_code": code,
                       "gpu_limits": results.limits_record(limits, end_limits or {})}
    if outlived:  # found by the kernel's process tree or the run's tag, stopped by the launcher
        doc["launcher"]["outlived_processes"] = outlived
    idle = results.sweep_idle_baseline(run_dir, bool(spec.sweep))
    if idle is not None:
        doc["launcher"]["idle_baseline"] = idle
    # Again, now that the enforced limits and the idle baseline are in.
    doc["validity"] = validity.evaluate(doc, "launcher")
    mllog = (doc.get("sidecar") or {}).get("mllog")
    if mllog:  # its run_stop status follows the final verdict
        from hpcai.workloads import mlperf_log

        mlperf_log.restamp_status(run_dir / mllog, doc)
    return clean(doc)


def _judge_tier(doc: dict, spec: RunSpec) -> None:
    """The measurement tier judged again here, on the node's host, where the
    calibration's owner is its real one. In a container under an unprivileged user
    namespace (Apptainer's default since 1.1) root's files show as owned by
    `nobody`, so the workload's own reading says counter on a calibrated node; and a
    workload (a plugin) cannot claim a tier the node does not have. Only where the
    workload measured a power section (its tier set)."""
    from hpcai.launcher.site.tier import current_tier
    from hpcai.spec import UNSET

    power = doc.get("power")
    if isinstance(power, dict) and power.get("tier") is not None:
        power["tier"] = current_tier({} if spec.node_power is UNSET else spec.node_power)


def measured_clocks(doc: dict) -> dict[int, dict]:
    """Per used GPU, the mean SM and memory clock the sampler saw, MHz."""
    return {g["index"]: {"sm": g.get("sm_clock_mhz_mean"), "mem": g.get("memory_clock_mhz_mean")}
            for g in doc.get("gpus") or [] if g.get("used")}
