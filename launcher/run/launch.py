"""`hpcai-launch WORKLOAD`: the entry of every launch mode. A Slurm submission,
a sweep (several caps, a grid, repeats) or a single run on this node; each mode
plans through launcher/run/plan.py and runs through launcher/run/process.py.
"""
from __future__ import annotations

from hpcai.launcher.run.options import Options


def launch(opts: Options, placement: dict | None = None, run_id: str | None = None) -> int:
    # A generic option the workload would ignore is refused before anything is submitted or set.
    from hpcai.workloads.catalog import get_workload

    get_workload(opts.workload).refuse_unhonoured(opts.impl, opts.params)
    if opts.slurm is not None:
        from hpcai.launcher.slurm.submit import submit

        return submit(opts, opts.slurm)
    if opts.is_sweep:
        from hpcai.launcher.sweep.driver import run_sweep

        return run_sweep(opts)
    from hpcai.launcher.run.single import run_single

    return run_single(opts, placement, run_id)
