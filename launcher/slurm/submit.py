"""`hpcai-launch WORKLOAD ... --slurm`: check what can be checked on the
login node, write the job folder and submit it. Nothing is left behind when
sbatch refuses the job."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import HpcaiError, SlurmError, UsageError
from hpcai.launcher.site import config as sites
from hpcai.launcher.slurm import commands
from hpcai.launcher.slurm.job import (SCRIPT_FILE, Job, RunSlot, SlurmOptions, log_path,
                                      new_job_doc, stamp)
from hpcai.workloads.catalog import get_workload


def with_site_defaults(slurm: SlurmOptions, site: dict, device: str) -> SlurmOptions:
    scheduler = site["scheduler"]
    if scheduler["kind"] != "slurm":
        raise UsageError(f"site {site['name']!r} has no Slurm (scheduler.kind = "
                         f"{scheduler['kind']!r})", "set [scheduler] kind = \"slurm\" in its file, "
                         "or drop --slurm")
    if slurm.nodes < 1:
        raise UsageError("--nodes must be at least 1", f"got {slurm.nodes}")
    gpus = slurm.gpus_per_node
    if gpus is None and device != "cpu":
        gpus = site["gpu"].get("per_node")
    return SlurmOptions(
        nodes=slurm.nodes, array=slurm.array,
        partition=slurm.partition or scheduler["partition"] or None,
        account=slurm.account or scheduler["account"] or None,
        time=slurm.time or scheduler["time"] or None,
        gpus_per_node=gpus or None,
        extra_options=[*scheduler["extra_options"], *slurm.extra_options])


def run_slots(opts, nodes: int, when: str | None = None,
              batches: dict | None = None) -> tuple[list[RunSlot], int | None]:
    """One slot per grid point, cap and repeat, in the sweep's order; run ids shared
    by all nodes. batches: nodes -> batch per process (strong scaling)."""
    from hpcai.launcher.sweep import grid
    from hpcai.launcher.sweep.slots import Slot, new_seed, schedule

    preset = opts.preset or "auto"
    seed = None
    if opts.is_sweep:
        seed = opts.seed if opts.seed is not None else new_seed()
        slots = schedule(list(opts.caps) if opts.caps else [None], opts.repeat, opts.order,
                         seed, points=grid.points(opts.vary or []))
    else:
        slots = [Slot(opts.cap_w, 0)]
    when = when or stamp()
    runs = []
    for i, slot in enumerate(slots):
        cap = "" if slot.cap_w is None else f"-cap{slot.cap_w:g}W"
        suffix = f"-{i:03d}" if len(slots) > 1 else ""
        step = dict(slot.point).get("nodes")
        params = {"batch_size": batches[step]} if batches and step in batches else {}
        runs.append(RunSlot(i, f"{when}-{opts.workload}-{preset}{cap}-{step or nodes}n{suffix}",
                            slot.cap_w, slot.repeat, [list(p) for p in slot.point], step, params))
    return runs, seed


def check_options(opts, slurm: SlurmOptions, site: dict) -> None:
    """What the login node can check; each node checks its GPUs again before a cap."""
    workload = get_workload(opts.workload)
    impl = workload.impl(opts.impl)
    if slurm.nodes > 1 and impl.process_model != "torchrun":
        raise UsageError(f"{workload.name} ({impl.framework}) runs on one node",
                         "drop --nodes, or use --nodes 1")
    if opts.preset:
        workload.preset(opts.preset)
    from hpcai.launcher.run.plan import outside_site_range

    for cap in (opts.caps or [opts.cap_w]):
        problem = None if cap is None else outside_site_range(cap, site)
        if problem:
            raise UsageError(problem, "choose a cap inside it")
    if slurm.array and not opts.is_sweep:
        raise UsageError("--array needs several runs", "give a cap list or range, or --repeat N")
    if opts.image and not Path(opts.image).is_file():
        raise UsageError(f"image {opts.image} does not exist", "check the --image path")


def expected_preset(opts, slurm: SlurmOptions) -> str:
    """The preset the node will choose, for the job folder's name: the one given,
    else the workload's default for the device the job gets (GPUs when it asks
    for them), else "default" when only the node can tell."""
    if opts.preset:
        return opts.preset
    workload = get_workload(opts.workload)
    if opts.device == "cpu":
        return workload.cpu_default_preset
    if opts.device == "cuda" or slurm.gpus_per_node:
        return workload.gpu_default_preset
    return "default"


def submit(opts, slurm: SlurmOptions, argv: list[str] | None = None) -> int:
    site = sites.load(opts.site)
    slurm, batches = _allocation(opts, with_site_defaults(slurm, site, opts.device))
    check_options(opts, slurm, site)
    results = Path(opts.output or site["paths"]["results"]).absolute()
    when = stamp()
    runs, seed = run_slots(opts, slurm.nodes, when, batches)
    command = ["hpcai-launch", *(argv if argv is not None else sys.argv[1:])]
    folder = results / f"slurm-{when}-{opts.workload}-{expected_preset(opts, slurm)}"
    job = Job(folder, new_job_doc(opts, slurm, runs, command, seed))
    from hpcai.launcher.run.options import log as say
    from hpcai.launcher.slurm import inrun_node

    if inrun_node.choose(opts, slurm, say):  # one step measures every cap, a segment each
        job.doc["in_run"] = inrun_node.job_block(opts, runs, when, opts.preset or "auto",
                                                 slurm.nodes, job.doc["options"])
    from hpcai.launcher.slurm.script import render

    script = render(job)
    if opts.dry_run:
        print(script, end="")
        print(f"hpcai: --dry-run: not submitted; the job folder would be {folder}", file=sys.stderr)
        return 0
    job_id = _write_and_submit(job, script, slurm, results)
    log = log_path(folder, job_id, "0" if job.is_array else None)
    print(f"submitted job {job_id}: {opts.workload}, {len(runs)} run(s) on {slurm.nodes} "
          f"node(s){' in-run (one step)' if job.in_run else ''}; job folder {folder}; "
          f"log {log.name}; follow it with `hpcai-launch jobs`")
    if slurm.gpus_per_node is None and opts.device != "cpu":
        print("note: the job asked Slurm for no GPUs (no --gpus, no [gpu] per_node in the "
              "site); where a partition hands out GPUs as resources, submit with --gpus N")
    return 0


def _allocation(opts, slurm: SlurmOptions):
    """Node scaling: one allocation of the most nodes, a step each (and, strong
    scaling, each step's batch); otherwise the options as given."""
    from hpcai.launcher.slurm.scaling import node_counts, strong_batches

    if not node_counts(opts):
        return slurm, None
    import dataclasses

    slurm = dataclasses.replace(slurm, nodes=max(node_counts(opts)))
    if opts.scaling != "strong":
        return slurm, None
    workload = get_workload(opts.workload)
    preset = opts.preset or (workload.cpu_default_preset if opts.device == "cpu"
                             else workload.gpu_default_preset)
    return slurm, strong_batches(opts, slurm, workload.preset(preset).params)


def _write_and_submit(job: Job, script: str, slurm: SlurmOptions, results: Path) -> str:
    """The job folder written and sbatch'ed; a refused job leaves nothing behind."""
    from hpcai.launcher.run.plan import check_output_dir

    commands.require("sbatch")
    if slurm.partition:
        known = commands.partitions()
        if slurm.partition not in known:
            raise SlurmError(f"unknown partition {slurm.partition!r} (this cluster has: "
                             f"{', '.join(known) or 'none'})",
                             "pick one with --partition or the site's [scheduler] partition")
    check_output_dir(results)
    job.folder.mkdir(mode=0o755, parents=True)  # exclusive; writable by us alone
    try:
        from hpcai.safe_files import Folder

        with Folder.open(job.folder) as folder:  # never through a planted link
            folder.write_text(SCRIPT_FILE, script)
        job.write()
        job_id = commands.submit(job.folder / SCRIPT_FILE)
    except (HpcaiError, OSError, KeyboardInterrupt):
        shutil.rmtree(job.folder, ignore_errors=True)
        raise
    job.doc.update(job_id=job_id, submitted=now_iso())
    job.write()
    return job_id
