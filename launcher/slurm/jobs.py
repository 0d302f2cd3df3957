"""`hpcai-launch jobs`: what was submitted from this results folder and where
each job stands: Slurm's state while it knows the job (scontrol, then squeue),
the results' own state after that. `--wait` follows jobs until they end."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from hpcai.errors import SlurmError, UsageError
from hpcai.launcher.run.results import load
from hpcai.launcher.slurm import commands
from hpcai.launcher.slurm.job import AGGREGATE_FILE, Job, find_jobs, log_path

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "RESIZING", "STAGE_OUT", "SIGNALING"}
POLL_S = 2.0


@dataclass
class JobState:
    job: Job
    state: str  # Slurm's JobState, or ENDED once Slurm has forgotten the job
    exit_code: str | None
    log: Path | None
    complete_runs: int
    reason: str | None = None  # why Slurm keeps it pending

    @property
    def shown(self) -> str:
        return f"{self.state} ({self.reason})" if self.reason else self.state

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" or (self.state == "ENDED" and
                                             self.complete_runs == len(self.job.runs))


def _worst(states: list[str]) -> str:
    """An array's state: active while any task is, else the first bad one, else COMPLETED."""
    for state in states:
        if state in ACTIVE:
            return state
    bad = [s for s in states if s != "COMPLETED"]
    return bad[0] if bad else "COMPLETED"


def complete_runs(job: Job) -> int:
    done = 0
    for slot in job.runs:
        doc = load(job.folder / slot.run_id / AGGREGATE_FILE)  # None until it is written
        done += bool(doc and doc.get("status") == "complete")
    return done


def state_of(job: Job) -> JobState:
    done = complete_runs(job)
    if job.job_id is None:
        return JobState(job, "NOT_SUBMITTED", None, None, done)
    records = commands.job_records(job.job_id)
    if records:
        states = [r.get("JobState", "UNKNOWN") for r in records]
        state = _worst(states)
        record = next((r for r in records if r.get("JobState") == state), records[0])
        log = Path(record["StdOut"]) if record.get("StdOut") else log_path(job.folder, job.job_id)
        reason = record.get("Reason") if state == "PENDING" else None
        return JobState(job, state, record.get("ExitCode"), log, done,
                        reason if reason not in (None, "None") else None)
    queued = commands.queued([job.job_id])
    if queued:
        return JobState(job, _worst(list(queued.values())), None, None, done)
    task = "0" if job.is_array else None
    return JobState(job, "ENDED", None, log_path(job.folder, job.job_id, task), done)


def show(results: str, job_ids: list[str], wait: bool, timeout_s: float | None) -> int:
    folder = Path(results)
    jobs = find_jobs(folder)
    if job_ids:
        wanted = set(job_ids)
        jobs = [j for j in jobs if j.job_id in wanted]
        missing = wanted - {j.job_id for j in jobs}
        if missing:
            raise UsageError(f"no job {', '.join(sorted(missing))} in {folder}",
                             "pass the results folder it was submitted to with -o")
    if not jobs:
        print(f"no jobs submitted to {folder.absolute()}")
        return 0
    if any(j.job_id for j in jobs):
        commands.require("scontrol")
    states = [state_of(j) for j in jobs]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while wait and any(s.active for s in states):
        if deadline is not None and time.monotonic() > deadline:
            raise SlurmError(f"jobs still running after {timeout_s:g} s",
                             "check them with `hpcai-launch jobs` later")
        time.sleep(POLL_S)
        states = [state_of(j) if s.active else s for j, s in zip(jobs, states)]
    _print_table(states)
    if wait:
        bad = [s for s in states if not s.ok]
        if bad:
            first = bad[0]
            raise SlurmError(f"job {first.job.job_id} ended {first.state}"
                             + (f" (exit {first.exit_code})" if first.exit_code else ""),
                             f"see its log {first.log}" if first.log else
                             f"see {first.job.folder}")
    return 0


def _print_table(states: list[JobState]) -> None:
    header = ("JOB", "STATE", "WORKLOAD", "NODES", "RUNS DONE", "FOLDER")
    rows = [header]
    for s in states:
        rows.append((s.job.job_id or "-", s.shown, s.job.doc["workload"], str(s.job.nodes),
                     f"{s.complete_runs}/{len(s.job.runs)}", str(s.job.folder)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for s in states:
        if not s.active and not s.ok and s.log is not None:
            print(f"job {s.job.job_id} {s.state}: see its log {s.log}")
