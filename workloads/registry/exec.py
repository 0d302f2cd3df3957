"""`hpcai-launch exec -- COMMAND ARGS...`: any program as a workload (issue 30).

The measured process is the user's command; hpcai's entrypoint runs it as a
child (workloads/exec_run.py), so caps, clocks, the lifeline, telemetry, node
power, validity and sweeps are the built-in workloads' own. The figure of merit
is time to solution (one solution: the whole command), units counted from the
command's output (--progress-regex), or units the program reports through the
hpcai.measure API (--api).
"""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.workloads.declaration import Impl, Preset, Workload
from hpcai.workloads.params import WorkloadParams, param

# The whole command is one unit of work: throughput is solutions per second and
# energy per unit is energy to solution.
SOLUTIONS = "solutions"
COUNT_MODES = ("solution", "regex", "api")


@dataclass(frozen=True)
class ExecParams(WorkloadParams):
    command: list = param([])  # argv; the command line's words after `--`
    cwd: str | None = None  # where the launcher was started: the command runs there
    units: str | None = param(None, flag="--units",
                              help="name of the unit of work the program reports (tokens, "
                                   "samples, cells, ...): needs --progress-regex or --api; "
                                   "default: solutions, the whole command being one")
    progress_regex: str | None = param(
        None, flag="--progress-regex",
        help="count work from the command's output: a Python regex with a named group "
             "(?P<units>N) units since the last match, (?P<total>N) units so far, or "
             "(?P<rate>R) units per second; each matching line closes an interval "
             "at the line's time stamp (the first interval is warm-up)")
    api: bool = param(False, flag="--api", type="flag",
                      help="the program reports windows and units through hpcai.measure "
                           "(import hpcai.measure; with hpcai.measure.window(...): ...)")
    # A program measuring itself (hpcai.measure run alone): its pid and events file;
    # python -m hpcai.workloads.measure_alone sets these, never the command line.
    attach_pid: int | None = None
    events: str | None = None


_TIME_TO_SOLUTION = {"warmup_epochs": 0, "epochs": 1, "steps_per_epoch": 1}

COMMAND = Preset(
    "command",
    "the command given after `--`, measured by time to solution (or --progress-regex/--api)",
    params={"batch_size": 1},
    protocol=_TIME_TO_SOLUTION,
    sources={"protocol": "ours: one measured run of the whole command"},
)

HPCC = Preset(
    "hpcc",
    "HPC Challenge (Debian's hpcc: HPL, DGEMM, STREAM, PTRANS, RandomAccess, FFT) on one MPI "
    "rank, N=2000, measured by time to solution; `apt-get install hpcc`",
    params={"batch_size": 1, "command": ["{python}", "-m", "hpcai.workloads.hpcc_app",
                                         "--n", "2000", "--nb", "80"]},
    protocol=_TIME_TO_SOLUTION,
    sources={"command": "ours: hpcc 1.5.0's example input (/usr/share/doc/hpcc/examples/"
                        "_hpccinf.txt) with one rank (P=Q=1) and N=2000",
             "protocol": "ours: one measured run of the whole suite"},
)

# Programs a preset's command needs on PATH, checked before any cap is set.
NEEDS = {"hpcc": ("hpcc", "apt-get install hpcc (Debian, Ubuntu)")}

WORKLOAD = Workload(
    name="exec",
    summary="any command under the cap (`hpcai-launch exec -- COMMAND ARGS...`): time to "
            "solution, units from its output, or units it reports through hpcai.measure",
    unit=SOLUTIONS,
    # In-run sweeps with --api: each measured window of the program is a segment
    # (workloads/window_segments.py); without it, one process per cap.
    impls={"command": Impl("exec_run", "hpcai", process_model="single", in_run="windows")},
    presets={p.name: p for p in (COMMAND, HPCC)},
    params=ExecParams,
    cpu_default_preset="command",
    gpu_default_preset="command",
    order=900,
    kind="command",
)
