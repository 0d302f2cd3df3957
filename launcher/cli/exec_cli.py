"""`hpcai-launch exec [run options] -- COMMAND ARGS...`: any command as the
`exec` workload (workloads/registry/exec.py), through the same launch path as
the built-in workloads (plan, caps, sweeps, Slurm, the result).

Everything the command line says is checked here, before anything is planned
or set: the command exists, the regex compiles and names what it counts, the
unit has a way to be counted.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from hpcai.errors import UsageError
from hpcai.workloads.registry.exec import ExecParams

EXAMPLE = "e.g. hpcai-launch exec --cap 300 -- python solve.py"


def exec_command(workload, decorators: list, run_workload) -> click.Command:
    """The click command: the workload's decorators (every run option and its own
    --units/--progress-regex/--api) and the command's words."""

    def command(command_words, **values):
        values = dict(values)
        values.update(_guarded_params(workload, command_words, values))
        if values.get("runtime") == "auto" and not values.get("image"):
            # The user's command is on this host; hpcai's images do not carry it.
            values["runtime"] = "host"
        return run_workload(workload, values)

    command = click.argument("command_words", nargs=-1, type=click.UNPROCESSED,
                             metavar="-- COMMAND [ARGS]...")(command)
    for decorate in reversed(decorators):
        command = decorate(command)
    return click.command(
        name="exec", context_settings={"allow_interspersed_args": False},
        help="Run any COMMAND under the cap and measure it as a workload: the same result, "
             "sweeps (--cap LIST, --repeat), clocks, node power and report as the built-in "
             "workloads.\n\nFigure of merit: time to solution (energy to solution, EDP) by "
             "default; units from the command's output with --progress-regex and --units; or "
             "units the program reports through hpcai.measure with --api. A command that exits "
             "non-zero is a failed run.\n\n\b\nExamples:\n"
             "  hpcai-launch exec --cap 300 -- python solve.py --n 4096\n"
             "  hpcai-launch exec --cap 200,300 --repeat 3 -- ./stream\n"
             "  hpcai-launch exec --units tokens --progress-regex 'tok/s: (?P<rate>[0-9.]+)' "
             "-- python train.py\n"
             "  hpcai-launch exec --api --units samples -- python my_loop.py\n"
             "  hpcai-launch exec --api --cap 200,300 -- python my_loop.py   one process, "
             "each measured window a segment at the next cap\n"
             "  hpcai-launch exec --preset hpcc      HPC Challenge (apt-get install hpcc)",
    )(command)


def _guarded_params(workload, words, values: dict) -> dict:
    from hpcai.launcher.cli.guarded import run_guarded

    return run_guarded(exec_params, workload, list(words), values)


def exec_params(workload, words: list[str], values: dict) -> dict:
    """The exec params the command line sets (command, cwd), after checking every
    exec option; a UsageError (one line) for the first thing wrong."""
    preset = workload.preset(values.get("preset") or workload.cpu_default_preset)
    argv = words or list(ExecParams.from_dict(preset.params).command)
    if not argv:
        raise UsageError("no command given", f"put it after `--`: {EXAMPLE}")
    regex, api, units = values.get("progress_regex"), values.get("api"), values.get("units")
    if regex is not None:
        from hpcai.workloads.exec_progress import compile_regex

        compile_regex(regex)
    if regex is not None and api:
        raise UsageError("--progress-regex and --api both count units",
                         "give one: the regex reads the output, --api the program's reports")
    if units is not None:
        if not regex and not api:
            raise UsageError(f"--units {units} has no way to count them",
                             "add --progress-regex with a (?P<units>...), (?P<total>...) or "
                             "(?P<rate>...) group, or --api when the program reports them "
                             "through hpcai.measure")
        if not units.replace("_", "").replace("-", "").isalnum() or not units[:1].isalpha() \
                or len(units) > 32:
            raise UsageError(f"--units {units!r} is not a unit name",
                             "use a word: tokens, samples, cells, iterations")
    if not values.get("image"):
        _check_runnable(argv[0])
        from hpcai.workloads.registry.exec import NEEDS

        program, install = NEEDS.get(preset.name, (None, None)) if not words else (None, None)
        if program is not None and shutil.which(program) is None:
            raise UsageError(f"preset {preset.name} runs {program!r}, which was not found on PATH",
                             f"install it ({install})")
    return {"command": argv if words else None, "cwd": os.getcwd()}


def _check_runnable(program: str) -> None:
    """On the host: the program exists and may be run (in an image it is the image's)."""
    if program == "{python}":
        return
    if os.sep in program:
        path = Path(program)
        if not path.is_file():
            raise UsageError(f"command {program!r} does not exist",
                             "check the path (relative paths start where hpcai-launch runs)")
        if not os.access(path, os.X_OK):
            raise UsageError(f"command {program!r} is not executable",
                             f"chmod +x {program}, or run it through its interpreter")
        return
    if shutil.which(program) is None:
        raise UsageError(f"command {program!r} was not found on PATH",
                         "install it, or give its path")
