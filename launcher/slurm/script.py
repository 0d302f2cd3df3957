"""The batch script: plain bash a site admin can read, kept in the job folder.

Each run is one srun step with one task per node (that node's launcher),
followed by the run's aggregate on the batch host. At scancel or the time
limit Slurm sends SIGTERM to every process of the job: the launchers restore
their caps and mark their results interrupted, and the script stops after
writing the aggregate of the run it was in.
"""
from __future__ import annotations

import shlex
import sys

import hpcai
from hpcai.timestamps import now_iso
from hpcai.launcher.slurm.job import Job
from hpcai.launcher.slurm.script_values import check_value, sbatch_word

PYTHON_MODULE = ["-m", "hpcai.launcher.cli"]


def sbatch_options(job: Job) -> list[str]:
    slurm = job.doc["slurm"]
    workload = job.doc["workload"]
    options = [f"--job-name=hpcai-{workload}", f"--nodes={slurm['nodes']}",
               "--ntasks-per-node=1"]
    log = job.folder / ("slurm-%A_%a.out" if job.is_array else "slurm-%j.out")
    if job.is_array:
        options.append(f"--array=0-{len(job.runs) - 1}")
    options.append(f"--output={log}")
    for key in ("partition", "account", "time"):
        if slurm.get(key):
            options.append(f"--{key}={check_value(f'--{key}', slurm[key])}")
    if slurm.get("gpus_per_node"):
        options.append(f"--gpus-per-node={slurm['gpus_per_node']}")
    options += [check_value("--slurm-option (or the site's [scheduler] extra_options)", o)
                for o in slurm.get("extra_options") or []]
    return [check_value("an sbatch option", o) for o in options]


def _check_script_values(job: Job, python: str) -> None:
    """Every other value the script carries, refused before a line is written."""
    check_value("the workload", job.doc["workload"])
    check_value("the job folder", job.folder)
    check_value("the working folder", job.doc["workdir"])
    check_value("the Python interpreter", python)
    for word in job.doc["command"]:
        check_value("the command line", word)
    for run in job.runs:
        check_value("a run id", run.run_id)


def how_runs_run(job: Job) -> str:
    if job.is_array:
        return "a job array, one run per task"
    if job.in_run:
        return "in-run: one step measures every run, a segment each"
    return "one after another"


def render(job: Job, python: str = sys.executable) -> str:
    runs = job.runs
    caps = sorted({r.cap_w for r in runs}, key=lambda c: (c is None, c or 0))
    caps_text = ", ".join("uncapped" if c is None else f"{c:g} W" for c in caps)
    hpcai_cmd = shlex.join([python, *PYTHON_MODULE])
    options = sbatch_options(job)  # the options first: they name what is wrong best
    _check_script_values(job, python)
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {sbatch_word(opt)}" for opt in options]
    lines += [
        f"# hpcai {hpcai.__version__}, written {now_iso()} by: {shlex.join(job.doc['command'])}",
        f"# {job.doc['workload']}: {len(runs)} run(s) on {job.nodes} node(s) ({caps_text}),"
        f" {how_runs_run(job)}.",
        "# Each run: one launcher per node (it caps that node's GPUs and restores them),",
        "# then the run's aggregate.json. Submit again with `sbatch job.sbatch` from here.",
        "set -u",
        f"JOB_DIR={shlex.quote(str(job.folder))}",
        f"HPCAI=({hpcai_cmd})",
        f"cd {shlex.quote(job.doc['workdir'])} || exit 1  # where it was submitted from",
        "status=0",
        'stopped=""',
        "# scancel or the time limit: the launchers get SIGTERM from Slurm themselves.",
        "trap 'stopped=1' TERM INT",
    ]
    lines += in_run_body(job) if job.in_run else runs_body(job)
    lines.append('exit "$status"')
    return "\n".join(lines) + "\n"


def runs_body(job: Job) -> list[str]:
    """One step per run (a job array: this task's run), each then aggregated."""
    runs = job.runs
    lines = [
        "run() {",
        '  echo "hpcai: run $1 on %s node(s): $SLURM_JOB_NODELIST"' % (
            "${2:-$SLURM_JOB_NUM_NODES}" if any(r.nodes for r in runs) else "$SLURM_JOB_NUM_NODES"),
        # --ntasks too: a step on fewer nodes than the job's would otherwise inherit
        # the job's task count (SLURM_NTASKS) and be refused ("More processors
        # requested than permitted").
        '  srun --nodes="%s" --ntasks="%s" --ntasks-per-node=1 --kill-on-bad-exit=1 \\' % ((
            "${2:-$SLURM_JOB_NUM_NODES}" if any(r.nodes for r in runs) else "$SLURM_JOB_NUM_NODES",) * 2),
        '    "${HPCAI[@]}" slurm-node "$JOB_DIR" --run "$1"',
        "  local rc=$?",
        '  "${HPCAI[@]}" slurm-aggregate "$JOB_DIR" --run "$1"',
        '  local aggregate_rc=$?',
        '  [ "$rc" -ne 0 ] || rc=$aggregate_rc',
        '  [ "$rc" -eq 0 ] || status=$rc',
        "}",
    ]
    steps = [r.nodes for r in runs]
    if any(n is not None for n in steps):  # --vary nodes: each run's step has its own count
        lines.append("STEP_NODES=(" + " ".join(str(n or job.nodes) for n in steps) + ")")
    at = ' "${STEP_NODES[$%s]}"' if any(n is not None for n in steps) else ""
    if job.is_array:
        lines.append('run "$SLURM_ARRAY_TASK_ID"' + (at % "SLURM_ARRAY_TASK_ID" if at else ""))
    else:
        lines += [f"for index in {' '.join(str(r.index) for r in runs)}; do",
                  '  run "$index"' + (at % "index" if at else ""),
                  '  [ -z "$stopped" ] || break',
                  "done"]
        if at:  # every run done: each aggregate again, now that the one-node runs exist
            lines += [f"for index in {' '.join(str(r.index) for r in runs)}; do",
                      '  "${HPCAI[@]}" slurm-aggregate "$JOB_DIR" --run "$index" || true',
                      "done"]
    return lines


def in_run_body(job: Job) -> list[str]:
    """An in-run sweep: one step (one launcher per node measures every run, a
    segment each, in the job's order), then each run's aggregate, for the runs
    that started (a cancelled step leaves the rest without a folder)."""
    runs = job.runs
    return [
        'echo "hpcai: in-run sweep of %d run(s) in one step on $SLURM_JOB_NUM_NODES node(s): '
        '$SLURM_JOB_NODELIST"' % len(runs),
        'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
        "--ntasks-per-node=1 --kill-on-bad-exit=1 \\",
        '  "${HPCAI[@]}" slurm-node "$JOB_DIR" --in-run',
        "status=$?",
        "RUN_IDS=(" + " ".join(shlex.quote(r.run_id) for r in runs) + ")",
        f"for index in {' '.join(str(r.index) for r in runs)}; do",
        '  [ -d "$JOB_DIR/${RUN_IDS[$index]}" ] || continue',
        '  "${HPCAI[@]}" slurm-aggregate "$JOB_DIR" --run "$index" || '
        '{ rc=$?; [ "$status" -ne 0 ] || status=$rc; }',
        "done",
    ]
