"""`--vary PARAM=v1,v2,...`: a sweep over more than the cap. Each --vary adds an
axis; the grid is every combination of their values (with every cap and
repeat), run in the cap sweep's order, resumable, planned by --dry-run and
submitted by --slurm like one (launcher/sweep/driver.py).

A grid point is a tuple of (name, value) pairs in the order the axes were given.
"""
from __future__ import annotations

import dataclasses
import itertools

from hpcai.errors import UsageError

# Axes every workload has; a workload adds its own (catalog Workload.vary_params).
COMMON_AXES = ("gpus", "batch_size", "model", "nodes")
SCALING = ("strong", "weak")
MAX_VALUES = 32


def axes_for(workload) -> tuple[str, ...]:
    return COMMON_AXES + tuple(workload.vary_params)


def parse_vary(texts, workload) -> list[tuple[str, list]]:
    """["gpus=1,2,4", "batch_size=64,128"] as [(name, values)], each checked."""
    axes: list[tuple[str, list]] = []
    known = axes_for(workload)
    example = "example: --vary gpus=1,2,4 or --vary batch_size=64,128,256"
    for text in texts or ():
        name, sep, values = str(text).partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise UsageError(f"--vary {text!r} needs PARAM=V1,V2 (a comma list)", example)
        if name not in known:
            raise UsageError(f"--vary: {workload.name} has no parameter {name!r} to vary",
                             f"choose one of: {', '.join(known)}")
        if name in (n for n, _ in axes):
            raise UsageError(f"--vary {name} is given twice", "give each parameter once")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise UsageError(f"--vary {name}= has no values", example)
        if len(items) > MAX_VALUES:
            raise UsageError(f"--vary {name} has {len(items)} values", f"use at most {MAX_VALUES}")
        axes.append((name, _values(name, items, workload)))
    return axes


def _values(name: str, items: list[str], workload) -> list:
    if name == "model":
        ladder = dict(workload.model_ladder)
        for item in items:
            if item not in ladder and item not in workload.presets:
                names = [*ladder, *workload.presets]
                raise UsageError(f"--vary model: {workload.name} has no size or preset {item!r}",
                                 f"choose from: {', '.join(names)}")
        return list(dict.fromkeys(items))
    numbers = []
    for item in items:
        try:
            number = int(item)
        except ValueError:
            raise UsageError(f"--vary {name}: {item!r} is not a whole number",
                             f"example: --vary {name}=1,2,4") from None
        if number < 1:
            raise UsageError(f"--vary {name}: {item!r} must be at least 1",
                             f"example: --vary {name}=1,2,4")
        numbers.append(number)
    return sorted(set(numbers))


def points(axes: list[tuple[str, list]]) -> list[tuple]:
    """Every combination, the first axis slowest."""
    if not axes:
        return [()]
    names = [n for n, _ in axes]
    return [tuple(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes))]


def describe(point: tuple) -> str:
    return ", ".join(f"{name} {value}" for name, value in point)


def apply(opts, point: tuple, device_type: str | None = None):
    """The launcher options of one grid point. On a CPU run, `gpus` sets the
    processes that stand for GPUs (--nproc)."""
    changes: dict = {}
    params = dict(opts.params)
    for name, value in point:
        if name == "gpus":
            if device_type == "cpu" or opts.device == "cpu":
                changes["nproc"] = value
            else:
                changes["gpus"] = value
        elif name == "model":
            from hpcai.workloads.catalog import get_workload

            ladder = get_workload(opts.workload).model_ladder
            if value in ladder:
                params.update(ladder[value])
            else:
                changes["preset"] = value
        elif name == "nodes":
            continue  # the Slurm step's node count (launcher/slurm)
        else:
            params[name] = value
    return dataclasses.replace(opts, params=params, **changes)


def check(opts, axes: list[tuple[str, list]], nodes_given: bool = False) -> None:
    """What cannot be combined: a varied value also fixed by its own option."""
    given = {k for k, v in opts.params.items() if v is not None}  # set on the command line
    fixed = {"gpus": opts.gpus if opts.gpus is not None else opts.nproc,
             "batch_size": True if "batch_size" in given else None, "model": opts.preset,
             "nodes": True if nodes_given else None}
    flags = {"gpus": "--gpus/--nproc", "model": "--preset", "nodes": "--nodes"}
    for name, _values in axes:
        if fixed.get(name, True if name in given else None) is not None:
            flag = flags.get(name, f"--{name.replace('_', '-')}")
            raise UsageError(f"--vary {name} and {flag} both set it", f"drop {flag}")
        if name == "nodes" and opts.slurm is None:
            raise UsageError("--vary nodes needs --slurm (one launcher per node)",
                             "add --slurm, or vary gpus on this node")
    if opts.scaling and "nodes" not in [n for n, _ in axes]:
        raise UsageError("--scaling only applies with --vary nodes",
                         "add --vary nodes=1,2,4 or drop --scaling")
