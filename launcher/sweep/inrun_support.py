"""Which sweeps measure in-run (one process for every cap): asked by the planner
(adaptive windows), the sweep and Slurm before any in-run machinery is loaded."""
from __future__ import annotations

from hpcai.errors import UsageError


def supported(workload_name: str, impl: str | None, params: dict | None = None) -> str | None:
    """None when the workload measures in-run, else why not (one line)."""
    from hpcai.workloads.catalog import get_workload

    workload = get_workload(workload_name)
    chosen = workload.impl(impl)
    if chosen.in_run == "windows" and not (params or {}).get("api"):
        # exec: only a program that marks its windows (--api) has segments to give.
        return (f"{workload_name} measures in-run only with --api (each of the program's "
                "measured windows a segment): one process per cap")
    if chosen.in_run is not None:  # declared on the implementation (Impl.in_run)
        return None
    return (f"{workload_name} ({impl or workload.default_impl}) cannot measure in-run yet: "
            "one run per cap, each with the preset's fixed epochs")


def adaptive_supported(workload_name: str, impl: str | None) -> str | None:
    """None when the workload can measure an adaptive window (--ci-target), else why
    not: SGLang serving measures in-run too, but each window is one load wave."""
    from hpcai.workloads.catalog import get_workload

    why = supported(workload_name, impl)
    kind = get_workload(workload_name).impl(impl).in_run
    if why is None and kind == "waves":
        return f"{workload_name} measures one load wave per window"
    if kind == "windows":
        return f"{workload_name}'s windows are the program's own"
    return why


def check_request(in_run: bool | None, caps: list | None, other_axes: str | None = None) -> None:
    """--in-run needs two caps or more, and nothing else varied or fixed (clock caps,
    a --vary grid: one process per slot): a one-line error otherwise."""
    distinct = {c for c in (caps or []) if c is not None}
    if in_run and len(distinct) < 2:
        raise UsageError("--in-run needs a sweep of two caps or more",
                         "give --cap LIST or START:STOP:STEP, or drop --in-run")
    if in_run and other_axes:
        raise UsageError(f"--in-run changes only the power cap, and this sweep has {other_axes}",
                         "drop --in-run (each slot then runs as its own process)")


def choose(opts, log, other_axes: str | None = None) -> bool:
    """Whether this sweep runs in-run: the default where the workload can."""
    distinct = {c for c in (opts.caps or []) if c is not None}
    if opts.in_run is False or len(distinct) < 2:
        return False
    if other_axes:
        log(f"this sweep has {other_axes}: one process per slot (in-run sweeps change only "
            "the cap)")
        return False
    why = supported(opts.workload, opts.impl, getattr(opts, "params", None))
    if why is not None:
        log(why)
        return False
    return True
