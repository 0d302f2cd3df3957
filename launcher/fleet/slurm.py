"""`fleet run --partition/--nodelist/--nodes`: one Slurm job per node, at most
--max-concurrent at once, each measuring its node's GPUs into the campaign.

The throttle: job i is named `hpcai-fleet-KEY-SLOT` (SLOT = i mod N) with
`--dependency=singleton`, so at most N run at once. A job array with `%N`
would throttle too, but an array's tasks cannot each be pinned to a node
(`--nodelist` applies to every task), and a fleet must measure every node
exactly once. Resuming (the same command again) submits jobs only for the
nodes whose GPUs are not all measured.
"""
from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import SlurmError, UsageError
from hpcai.launcher.fleet.campaign import (FINAL_STATES, campaign_doc, check_resumable,
                                           create_or_resume, node_name, open_campaign,
                                           safe_dir, write_json)
from hpcai.launcher.fleet.run import FleetRequest, measure_node

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED")


def resolve_nodes(partition: str | None, nodelist: str | None, nodes: int | None) -> list[str]:
    """The nodes to measure, each known to Slurm; a one-line error otherwise."""
    from hpcai.launcher.slurm import commands

    commands.require("sbatch")
    if partition is not None and partition not in commands.partitions():
        raise UsageError(f"Slurm has no partition {partition!r}",
                         f"choose from: {', '.join(commands.partitions())} (sinfo)")
    if nodelist:
        names = commands.hostnames(nodelist)
    else:
        args = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", partition] if partition else [])
        out = commands._run(args, "listing the nodes (sinfo)")
        names = sorted({line.strip() for line in out.splitlines() if line.strip()})
    if not names:
        where = f"partition {partition!r}" if partition else "Slurm"
        raise UsageError(f"{where} has no nodes", "check `sinfo` and give a partition with nodes, "
                                                  "or --nodelist")
    if nodes is not None:
        if nodes > len(names):
            raise UsageError(f"--nodes {nodes} asks for more nodes than the {len(names)} there",
                             f"give at most --nodes {len(names)}")
        names = names[:nodes]
    known = set(commands.hostnames(",".join(names))) if nodelist else set(names)
    for name in names:
        if name not in known:
            raise UsageError(f"node {name!r} is unknown to Slurm", "check `sinfo -N`")
        node_name(name)  # a name that cannot name a folder is refused now
    return names


def _jobs_still_queued(campaign) -> dict:
    from hpcai.launcher.slurm import commands

    jobs = ((campaign.doc.get("slurm") or {}).get("jobs") or {})
    states = commands.queued(list(jobs.values()))
    return {node: states[j] for node, j in jobs.items() if states.get(j) in ACTIVE}


def nodes_to_measure(campaign, names: list[str]) -> list[str]:
    """The nodes that lack a unit or have one not final."""
    units: dict[str, list] = {}
    for unit in campaign.units():
        units.setdefault(unit.node, []).append(unit)
    return [n for n in names if not units.get(node_name(n))
            or any(u.state not in FINAL_STATES for u in units[node_name(n)])]


def script(campaign_folder: Path, node: str, name: str, log: Path, options: dict,
           python: str = sys.executable) -> str:
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", "#SBATCH --dependency=singleton",
             "#SBATCH --nodes=1", "#SBATCH --ntasks=1", "#SBATCH --exclusive",
             f"#SBATCH --nodelist={node}", f"#SBATCH --output={log}"]
    lines += [f"#SBATCH --{key}={value}" for key, value in options.items() if value]
    lines += [f"# hpcai fleet: measure every GPU of {node} into {campaign_folder}",
              "# (at most one job of this name runs at once: Slurm's singleton dependency)",
              "set -u",
              f"cd {shlex.quote(str(Path.cwd()))} || exit 1",
              "srun --nodes=1 --ntasks=1 " + shlex.join(
                  [python, "-m", "hpcai.launcher.cli", "fleet", "node", str(campaign_folder)])]
    return "\n".join(lines) + "\n"


def submit(req: FleetRequest, partition: str | None, nodelist: str | None, nodes: int | None,
           max_concurrent: int, time_limit: str | None, account: str | None) -> int:
    from hpcai.launcher.slurm import commands

    fresh = campaign_doc(req.workload, req.preset, req.caps, "slurm", req.command,
                         req.run_settings())
    existing = check_resumable(req.output, fresh)
    names = resolve_nodes(partition, nodelist, nodes)
    if existing is not None:
        busy = _jobs_still_queued(existing)
        if busy:
            node, state = next(iter(busy.items()))
            raise UsageError(f"campaign {req.output} still has {len(busy)} job(s) queued or "
                             f"running (node {node}: {state})",
                             "wait for them (hpcai-launch fleet status) or scancel them first")
    campaign, resumed = create_or_resume(req.output, fresh)
    campaign.folder = campaign.folder.resolve()
    todo = nodes_to_measure(campaign, names)
    folder = safe_dir(campaign.folder / "slurm", "Slurm folder")
    key = hashlib.sha256(str(campaign.folder).encode()).hexdigest()[:8]
    options = {"partition": partition, "time": time_limit, "account": account}
    jobs = dict((campaign.doc.get("slurm") or {}).get("jobs") or {})
    for i, node in enumerate(todo):
        path = folder / f"fleet-{node_name(node)}.sbatch"
        path.write_text(script(campaign.folder, node, f"hpcai-fleet-{key}-{i % max_concurrent}",
                               folder / f"{node_name(node)}-%j.out", options))
        try:
            jobs[node] = commands.submit(path)
        except SlurmError:
            _record(campaign, names, jobs, max_concurrent, options)
            raise
    _record(campaign, names, jobs, max_concurrent, options)
    print(f"fleet {campaign.workload}: {'resumed' if resumed else 'campaign'} {campaign.folder}: "
          f"{len(todo)} node job(s) submitted, at most {max_concurrent} at once"
          + (f", {len(names) - len(todo)} node(s) already measured" if len(todo) < len(names)
             else "")
          + f"; progress: hpcai-launch fleet status {campaign.folder}")
    for node in todo:
        print(f"  {node}: job {jobs[node]}")
    return 0


def _record(campaign, names, jobs, max_concurrent, options) -> None:
    expected = sorted(set(campaign.doc.get("expected_nodes") or []) | set(names))
    campaign.doc.update(expected_nodes=expected,
                        slurm={"jobs": jobs, "max_concurrent": max_concurrent,
                               "submitted": now_iso(), **options})
    write_json(campaign.folder / "campaign.json", campaign.doc)


def run_node(folder: str) -> int:
    """Inside a fleet job: this node's GPUs, as `fleet run --local` measures them."""
    from hpcai.errors import DeviceError
    from hpcai.launcher.fleet.run import _visible_gpus, check_caps

    campaign = open_campaign(folder)
    settings = campaign.doc.get("run") or {}
    req = FleetRequest(workload=campaign.workload, caps=campaign.caps, output=folder,
                       preset=campaign.doc.get("preset"),
                       passthrough=settings.get("passthrough") or {},
                       selftest=settings.get("selftest", True),
                       selftest_s=settings.get("selftest_s", 5.0))
    gpus = _visible_gpus()
    if not gpus:
        raise DeviceError(f"no GPU visible on node {node_name()}",
                          "fleet jobs measure GPU nodes: leave this node out (--nodelist)")
    check_caps(gpus, req.caps)
    return measure_node(campaign, req, gpus, resumed=True)


def job_states(campaign) -> dict:
    """{node: "STATE (reason)"} of the campaign's jobs Slurm still knows; "ended" else."""
    from hpcai.launcher.slurm import commands

    jobs = ((campaign.doc.get("slurm") or {}).get("jobs") or {})
    if not jobs:
        return {}
    done = commands._call(["squeue", "-h", "-o", "%i|%T|%r", "-j", ",".join(jobs.values())])
    known = {}
    for line in done.stdout.splitlines():
        job, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        known[job] = state + (f" ({reason})" if reason and reason != "None" else "")
    return {node: known.get(job, "ended") for node, job in jobs.items()}
