"""Slurm's own energy accounting for a run's job step: `sacct`'s
ConsumedEnergyRaw (joules, "total energy consumed by all tasks in a job",
sacct(1); real only for an exclusive allocation). It covers the whole step on
all its nodes (start-up, warm-up and drain included), not the measured
window, so it is recorded beside the measured figures, never used for
efficiency. Where accounting has no energy plugin (AcctGatherEnergyType) the
field is empty or 0, and the reason says so.
"""
from __future__ import annotations

import subprocess

FIELDS = "JobID,NNodes,ElapsedRaw,ConsumedEnergyRaw,State"
NO_VAL64 = 0xFFFFFFFFFFFFFFFE  # Slurm's "no value" for 64-bit fields
BOUNDARY = "nodes of the step (Slurm acct_gather_energy plugin; the whole step, not the window)"
API = "sacct ConsumedEnergyRaw"


def parse_sacct(text: str, step: str) -> dict:
    """One step's line of `sacct --noheader --parsable2 --format=FIELDS`."""
    out = {"step": step, "api": API, "boundary": BOUNDARY, "consumed_energy_j": None,
           "elapsed_s": None, "nodes": None, "reason": None}
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) != len(FIELDS.split(",")) or cols[0] != step:
            continue
        _, nodes, elapsed, energy, state = cols
        out["nodes"] = int(nodes) if nodes.isdigit() else None
        out["elapsed_s"] = int(elapsed) if elapsed.isdigit() else None
        if not energy.isdigit() or int(energy) == 0:
            out["reason"] = (f"accounting recorded no energy for step {step} (state {state}): "
                             "the cluster has no AcctGatherEnergyType plugin, or it read nothing")
        elif int(energy) >= NO_VAL64:
            out["reason"] = f"accounting's energy for step {step} is Slurm's no-value marker"
        else:
            out["consumed_energy_j"] = float(energy)
        return out
    out["reason"] = f"sacct has no line for step {step}"
    return out


def step_energy(job_id: str, step_id: str, run=None, timeout_s: float = 10.0) -> dict:
    run = run or subprocess.run
    step = f"{job_id}.{step_id}"
    cmd = ["sacct", "-j", step, "--noheader", "--parsable2", f"--format={FIELDS}"]
    try:
        done = run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return {**parse_sacct("", step), "reason": "sacct is not installed here"}
    except subprocess.TimeoutExpired:
        return {**parse_sacct("", step), "reason": f"sacct did not answer within {timeout_s:g} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return {**parse_sacct("", step), "reason": f"sacct failed: {last}"}
    return parse_sacct(done.stdout, step)
