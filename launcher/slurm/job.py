"""A submitted job's folder: job.json (what was asked, the runs, the job id),
the batch script, Slurm's log, and one folder per run with a result per node
and the run's aggregate.

    <results>/slurm-<stamp>-<workload>-<preset>/
        job.json  job.sbatch  slurm-<jobid>.out
        <run_id>/node-0/result.json  <run_id>/node-1/result.json  <run_id>/aggregate.json
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import ConfigError

JOB_FILE = "job.json"
SCRIPT_FILE = "job.sbatch"
AGGREGATE_FILE = "aggregate.json"
JOB_VERSION = 1


@dataclass
class SlurmOptions:
    """What sbatch is asked for; site [scheduler] values fill what is not given."""

    nodes: int = 1
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    gpus_per_node: int | None = None
    array: bool = False  # a sweep as a job array (one task per run), not one allocation
    extra_options: list = field(default_factory=list)


@dataclass(frozen=True)
class RunSlot:
    index: int
    run_id: str
    cap_w: float | None
    repeat: int
    # --vary: this run's grid point [[param, value], ...], its step's node count
    # (None: the job's), and params it sets (the batch of strong scaling).
    point: list = field(default_factory=list)
    nodes: int | None = None
    params: dict = field(default_factory=dict)

    @property
    def step_nodes(self) -> int | None:
        return self.nodes


def stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")[:-4]


def node_dir(job_dir: Path, run_id: str, node_rank: int) -> Path:
    return Path(job_dir) / run_id / f"node-{node_rank}"


def log_path(job_dir: Path, job_id: str, task: str | None = None) -> Path:
    """Where the script's #SBATCH --output puts Slurm's log."""
    return Path(job_dir) / (f"slurm-{job_id}_{task}.out" if task is not None
                            else f"slurm-{job_id}.out")


@dataclass
class Job:
    folder: Path
    doc: dict

    @property
    def job_id(self) -> str | None:
        return self.doc.get("job_id")

    @property
    def nodes(self) -> int:
        return int(self.doc["slurm"]["nodes"])

    @property
    def is_array(self) -> bool:
        return bool(self.doc["slurm"]["array"])

    @property
    def in_run(self) -> bool:
        """One step measures every run, a segment each (launcher/slurm/inrun_node.py)."""
        return bool(self.doc.get("in_run"))

    @property
    def runs(self) -> list[RunSlot]:
        return [RunSlot(**r) for r in self.doc["runs"]]

    def run(self, index: int) -> RunSlot:
        runs = self.runs
        if not 0 <= index < len(runs):
            raise ConfigError(f"run {index} is not in {self.folder / JOB_FILE} "
                              f"({len(runs)} run(s))", f"use --run 0 to --run {len(runs) - 1}")
        return runs[index]

    def options(self, cap_w: float | None):
        """The launcher options of one run on one node."""
        from hpcai.launcher.run.options import Options

        return dataclasses.replace(Options(**self.doc["options"]), cap_w=cap_w, caps=None,
                                   repeat=1, output=str(self.folder))

    def slot_options(self, slot: RunSlot, device_type: str | None = None):
        """One run's options on one node: its cap, grid point and strong-scaling batch."""
        opts = self.options(slot.cap_w)
        if slot.point:
            from hpcai.launcher.sweep import grid

            opts = grid.apply(opts, tuple((n, v) for n, v in slot.point), device_type)
        if slot.params:
            opts = dataclasses.replace(opts, params={**opts.params, **slot.params})
        return dataclasses.replace(opts, vary=None, scaling=None)

    def nodes_of(self, slot: RunSlot) -> int:
        return slot.nodes or self.nodes

    def write(self) -> None:
        from hpcai.result_document import write_json_atomic

        write_json_atomic(self.folder / JOB_FILE, self.doc)

    @classmethod
    def load(cls, folder: Path | str) -> "Job":
        path = Path(folder) / JOB_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path} does not exist",
                              "pass the job folder that `hpcai-launch ... --slurm` printed") from None
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON ({exc})",
                              "resubmit the job; this file is written by the launcher") from None
        if doc.get("kind") != "hpcai.slurm-job":
            raise ConfigError(f"{path} is not an hpcai job file", "pass a job folder")
        return cls(Path(folder).absolute(), doc)


def new_job_doc(opts, slurm: SlurmOptions, runs: list[RunSlot], argv: list[str],
                seed: int | None) -> dict:
    stored = dataclasses.asdict(opts)
    # Each node runs one plain run: the sweep and Slurm parts live in this file.
    stored.update(caps=None, cap_w=None, repeat=1, dry_run=False, dry_run_json=False, slurm=None, in_run=None)
    if stored.get("vary"):  # JSON keeps the grid as [[param, [values]], ...]
        stored["vary"] = [[name, list(values)] for name, values in stored["vary"]]
    return {
        "kind": "hpcai.slurm-job", "job_version": JOB_VERSION,
        "job_id": None, "created": now_iso(), "submitted": None,
        # The job runs where it was submitted from: relative paths keep their meaning.
        "command": argv, "workdir": os.getcwd(), "workload": opts.workload,
        "slurm": dataclasses.asdict(slurm), "seed": seed, "order": opts.order,
        "options": stored,
        "runs": [dataclasses.asdict(r) for r in runs],
        # In-run sweeps (launcher/slurm/inrun_node.py): {"process_run_id", "key"}, else None.
        "in_run": None,
    }


def find_jobs(results: Path) -> list[Job]:
    """Job folders directly under a results folder, oldest first."""
    jobs = []
    for path in sorted(Path(results).glob(f"*/{JOB_FILE}")):
        try:
            jobs.append(Job.load(path.parent))
        except ConfigError:
            continue  # not ours, or half-written: `jobs` lists what it can read
    return jobs
