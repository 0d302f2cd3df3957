"""In-run sweeps under Slurm: one job step measures every cap of the job.

On each node `slurm-node JOB --in-run` starts one launcher, which holds its
own CapSession for its own GPUs (snapshot, journal, restore: launcher/sweep/inrun.py's
execute, exactly as a single-node in-run sweep) and serves its own node's
control channel in `<process>/node-<K>/control/`. The workload starts once on
all nodes (torchrun across them), warms up once, and measures one segment per
run of the job, in job.json's order: every node takes the order from the job
file, so all of them agree on the cap of segment K. Segment K of node K' is
filed as `<run_id of run K>/node-<K'>/result.json`, where a one-step-per-run job
puts it, so the per-run aggregates, `jobs` and `report` read it unchanged.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from hpcai.errors import SlurmError, UsageError, WorkloadError

IN_RUN_SUFFIX = "inrun"


def job_block(opts, runs: list, when: str, preset: str, nodes: int, options: dict) -> dict:
    """job.json's `in_run` part: the process's run id (the same on every node) and
    the sweep key its segments' spec.sweep carries."""
    from hpcai.launcher.sweep.resume import key_hash

    return {"process_run_id": f"{when}-{opts.workload}-{preset}-{nodes}n-{IN_RUN_SUFFIX}",
            "key": key_hash({"options": options, "caps": [r.cap_w for r in runs],
                             "mode": "in-run", "nodes": nodes})}


def choose(opts, slurm, log) -> bool:
    """Whether a Slurm sweep runs in-run: as without Slurm, the default for a cap
    sweep of a workload that can (--no-in-run: one step per run), in one
    allocation; an --array job is one task per run by its own request."""
    from hpcai.launcher.sweep import inrun_support
    from hpcai.launcher.sweep.driver import _other_axes

    if opts.in_run is False:
        return False
    if slurm.array:
        if opts.in_run:
            raise UsageError("--in-run measures every cap in one job step, and --array makes "
                             "one task per run", "drop --array (one allocation), or use --no-in-run")
        return False
    caps = list(opts.caps) if opts.caps else [opts.cap_w]
    inrun_support.check_request(opts.in_run, caps, other_axes=_other_axes(opts))
    return inrun_support.choose(opts, log, other_axes=_other_axes(opts))


def segment_place(job, node_rank: int, block: dict):
    """Segment K is job run K on this node: its run id, node folder and spec.sweep."""
    from hpcai.launcher.slurm.job import node_dir

    def place(spec, position: int, slot):
        run = job.run(position)
        return (spec.placed(run_id=run.run_id,
                            output_dir=str(node_dir(job.folder, run.run_id, node_rank)))
                .in_sweep({**block, "position": position, "repeat": slot.repeat})
                .on_node(spec.slurm.replace(run_index=position)))
    return place


class NodeSegments:
    """The sweep summary's stand-in on a node: each segment's status, for the
    launcher's exit code (the job's record is job.json and the aggregates)."""

    def __init__(self, total: int):
        self.total = total
        self.runs: dict[int, tuple[str, str | None]] = {}

    def set_run(self, position: int, quiet: bool = False, **fields) -> None:
        if "status" in fields:
            self.runs[position] = (fields["status"], fields.get("message"))

    def not_complete(self) -> list[tuple[int, str, str | None]]:
        out = []
        for position in range(self.total):
            status, message = self.runs.get(position, ("not started", None))
            if status != "complete":
                out.append((position, status, message))
        return out


def run_node(job_dir: str) -> int:
    """This node's launcher for every run of an in-run job (one srun step)."""
    from hpcai.launcher.sweep import inrun
    from hpcai.launcher.run.options import log
    from hpcai.launcher.run.plan import check_limits, make_plan, preflight
    from hpcai.launcher.slurm.job import Job
    from hpcai.launcher.slurm.node import Placement, slurm_entry
    from hpcai.launcher.sweep.slots import Slot
    from hpcai.measure.adaptive import SWEEP_CI_TARGET

    job = Job.load(job_dir)
    block = job.doc.get("in_run")
    if not block:
        raise SlurmError(f"job {job.folder} is not an in-run sweep",
                         "run slurm-node with --run N, as its batch script does")
    placement = Placement.from_environ()
    if placement.nodes != job.nodes:
        raise SlurmError(f"this step has {placement.nodes} node(s), the job asked for "
                         f"{job.nodes}", "run slurm-node through the job's batch script")
    runs = job.runs
    opts = job.options(runs[0].cap_w)
    if opts.protocol.get("ci_target") is None:  # sweeps measure adaptively by default
        opts = dataclasses.replace(opts, protocol={**opts.protocol, "ci_target": SWEEP_CI_TARGET})
    entry = slurm_entry(placement, runs[0].index, "allocation")
    plan = make_plan(opts, entry, block["process_run_id"])
    # Every cap checked on this node's GPUs before the first is set.
    check_limits(plan, [run.cap_w for run in runs])
    plan = inrun.process_plan(plan, len(runs))
    spec = plan.spec
    preflight(plan, Path(spec.output_dir).parent)
    sweep_block = {"id": job.folder.name, "key": block["key"],
                   "repeats": max(r.repeat for r in runs) + 1, "order": job.doc["order"],
                   "in_run": True, "process_run_id": block["process_run_id"]}
    if job.doc.get("seed") is not None:
        sweep_block["seed"] = job.doc["seed"]
    record = NodeSegments(len(runs))
    log(f"in-run sweep on node {placement.node_rank}: one process measures {len(runs)} "
        f"segment(s) in {spec.output_dir}")
    order = [(r.index, Slot(r.cap_w, r.repeat)) for r in runs]
    inrun.execute(plan, lambda session, backend, indices: inrun.Segments(
        spec, order, segment_place(job, placement.node_rank, sweep_block),
        record, session, backend, indices))
    bad = record.not_complete()
    if bad:
        position, status, message = bad[0]
        raise WorkloadError(
            f"in-run sweep on node {placement.node_rank}: {len(bad)} of {len(runs)} segment(s) "
            f"not complete (first: run {position}, "
            f"{Slot(runs[position].cap_w, runs[position].repeat).describe()}, {status}"
            + (f": {message}" if message else "") + ")",
            f"see {Path(spec.output_dir) / 'workload.log'}")
    return 0
