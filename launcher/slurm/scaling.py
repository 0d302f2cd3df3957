"""Node scaling under Slurm: `--vary nodes=1,2,4 [--scaling strong|weak]`.

One allocation of the largest node count; each run is an srun step over its
own number of nodes. Weak scaling keeps the batch per process; strong scaling
keeps the global batch of the fewest nodes, so each run's batch per process is
that global batch over its processes (which must divide it).
"""
from __future__ import annotations

from hpcai.errors import UsageError


def node_counts(opts) -> list[int]:
    return next((list(values) for name, values in (opts.vary or []) if name == "nodes"), [])


def processes_per_node(opts, slurm) -> int | None:
    if opts.device == "cpu" or (opts.nproc is not None and not slurm.gpus_per_node):
        return opts.nproc or 2
    return opts.gpus or slurm.gpus_per_node


def strong_batches(opts, slurm, preset_params: dict) -> dict[int, int]:
    """Nodes -> batch per process that keeps the global batch of the fewest nodes."""
    counts = node_counts(opts)
    per_node = processes_per_node(opts, slurm)
    if per_node is None:
        raise UsageError("--scaling strong needs the processes per node to fix the global batch",
                         "give --gpus N (or --device cpu --nproc N)")
    from hpcai.workloads.catalog import get_workload

    given = {k: v for k, v in opts.params.items() if v is not None}
    batch = get_workload(opts.workload).params.from_dict({**preset_params, **given}).batch_size
    if not isinstance(batch, int) and not str(batch).isdigit():
        raise UsageError(f"--scaling strong needs a fixed batch size, not {batch!r}",
                         "give --batch-size N (per process on the fewest nodes)")
    global_batch = int(batch) * per_node * min(counts)
    batches = {}
    for n in counts:
        share, left = divmod(global_batch, n * per_node)
        if left or share < 1:
            raise UsageError(f"--scaling strong: the global batch {global_batch} does not split "
                             f"evenly over {n} node(s) x {per_node} process(es)",
                             "choose a batch size or node counts that divide it")
        batches[n] = share
    return batches
