"""Inside the job: one launcher per node, started by srun (`slurm-node`).

It reads its place from Slurm's environment, runs one ordinary run on its
own GPUs (cap applied and restored there), and writes `<run>/node-<K>/`.
With more than one node, torchrun joins the others through a c10d
rendezvous at the first node's address.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from hpcai.errors import SlurmError

RDZV_PORT_BASE = 29500
RDZV_PORT_SPAN = 2000
PORT_ENV = "HPCAI_RDZV_PORT"


@dataclass(frozen=True)
class Placement:
    job_id: str
    step_id: str
    nodes: int
    node_rank: int
    nodelist: str
    port: int | None = None  # HPCAI_RDZV_PORT: where the derived port is taken at a site

    @classmethod
    def from_environ(cls, environ=os.environ) -> "Placement":
        missing = [v for v in ("SLURM_JOB_ID", "SLURM_NODEID") if v not in environ]
        if missing:
            raise SlurmError(f"{', '.join(missing)} not set: slurm-node runs inside a Slurm job",
                             "submit with `hpcai-launch WORKLOAD --slurm`")
        nodes = environ.get("SLURM_STEP_NUM_NODES") or environ.get("SLURM_JOB_NUM_NODES") or "1"
        return cls(job_id=environ["SLURM_JOB_ID"], step_id=environ.get("SLURM_STEP_ID", "0"),
                   nodes=int(nodes), node_rank=int(environ["SLURM_NODEID"]),
                   nodelist=environ.get("SLURM_STEP_NODELIST")
                   or environ.get("SLURM_JOB_NODELIST", ""),
                   port=int(environ[PORT_ENV]) if environ.get(PORT_ENV) else None)

    def rendezvous_port(self) -> int:
        """One port per job step, the same on every node, away from torchrun's 29500."""
        if self.port is not None:
            return self.port
        return RDZV_PORT_BASE + 1 + (int(self.job_id) * 31 + int(self.step_id)) % RDZV_PORT_SPAN


def first_node_address(nodelist: str) -> str:
    from hpcai.launcher.slurm import commands

    names = commands.hostnames(nodelist)
    if not names:
        raise SlurmError(f"the job's node list {nodelist!r} names no node",
                         "this is a Slurm set-up problem; see `scontrol show job`")
    return commands.node_address(names[0])


def slurm_entry(placement: Placement, run_index: int, mode: str) -> dict:
    """The spec's `slurm` part: where this node sits and how torchrun meets the others."""
    from hpcai.launcher.slurm import commands

    entry = {"job_id": placement.job_id, "step_id": placement.step_id, "run_index": run_index,
             "mode": mode, "nodes": placement.nodes, "node_rank": placement.node_rank,
             "rdzv_endpoint": None, "rdzv_id": None, "kill_wait_s": commands.kill_wait_s()}
    if placement.nodes > 1:
        address = first_node_address(placement.nodelist)
        entry["rdzv_endpoint"] = f"{address}:{placement.rendezvous_port()}"
        entry["rdzv_id"] = f"hpcai-{placement.job_id}-{placement.step_id}"
    return entry


def run_node(job_dir: str, run_index: int) -> int:
    from hpcai.launcher.run.single import run_single
    from hpcai.launcher.slurm.job import Job

    job = Job.load(job_dir)
    slot = job.run(run_index)
    placement = Placement.from_environ()
    if placement.nodes != job.nodes_of(slot):
        raise SlurmError(f"this step has {placement.nodes} node(s), the run asked for "
                         f"{job.nodes_of(slot)}", "run slurm-node through the job's batch script")
    entry = slurm_entry(placement, run_index, "array" if job.is_array else "allocation")
    if slot.point:  # a node-scaling or grid job: the report finds its point and mode here
        entry["point"] = slot.point
        entry["scaling"] = job.doc["options"].get("scaling") or (
            "weak" if slot.nodes is not None else None)
    device = None
    if any(name == "gpus" for name, _ in slot.point):  # a CPU node's `gpus` are processes
        from hpcai.launcher.run.plan import make_plan

        device = make_plan(job.options(slot.cap_w), entry, slot.run_id).spec.devices.type
    return run_single(job.slot_options(slot, device), placement=entry, run_id=slot.run_id)
