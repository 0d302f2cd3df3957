"""Where a result came from: host, scheduler job, hpcai version and commit.

Framework-free, so the launcher and the entrypoint can both use it.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from pathlib import Path

import hpcai

# Schedulers set one of these in every job; the first present names the job.
_JOB_ID_VARS = (
    ("slurm", "SLURM_JOB_ID"),
    ("pbs", "PBS_JOBID"),
    ("lsf", "LSB_JOBID"),
    ("flux", "FLUX_JOB_ID"),
)
# Images bake their build info into the installed package (no .git inside an
# image): definitions/common/install-hpcai.sh copies /opt/hpcai/build-info.json here.
_BUILD_INFO = Path(hpcai.__file__).with_name("_build_info.json")


def build_info() -> dict:
    """What the image's install script recorded (empty outside an image)."""
    try:
        return json.loads(_BUILD_INFO.read_text())
    except (OSError, ValueError):
        return {}


def hpcai_commit() -> str | None:
    """The git commit hpcai runs from: baked build info, env, or the checkout."""
    if os.environ.get("HPCAI_GIT_COMMIT"):
        return os.environ["HPCAI_GIT_COMMIT"]
    if _BUILD_INFO.exists():
        return build_info().get("commit")
    repo = Path(hpcai.__file__).resolve().parent.parent
    if not (repo / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out + ("-dirty" if dirty else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity mask and, inside a Slurm job,
    no more than the job holds on this node (without a task plugin that binds
    CPUs, the mask is the whole machine, and jobs sharing a node oversubscribe it)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    allocated = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if allocated.isdigit() and int(allocated) > 0:
        count = min(count, int(allocated))
    return count


def threads_per_process(processes: int) -> int:
    """Each of a node's worker processes gets its share of the usable cores (at least
    one): two workers that each took every core would oversubscribe the node, and
    a synchronous step waits for the rank the scheduler left out."""
    return max(1, usable_cpus() // max(1, processes))


def host_info() -> dict:
    scheduler, job_id = None, None
    for name, var in _JOB_ID_VARS:
        if os.environ.get(var):
            scheduler, job_id = name, os.environ[var]
            break
    hostname = socket.gethostname()
    return {
        "hostname": hostname,
        "node": os.environ.get("SLURMD_NODENAME", hostname.split(".")[0]),
        "scheduler": scheduler,
        "job_id": job_id,
        "cpu_model": cpu_model(),
        "cpu_count": usable_cpus(),
        "os": f"{platform.system()} {platform.release()}",
    }


def hpcai_versions() -> dict:
    return {
        "hpcai": hpcai.__version__,
        "hpcai_commit": hpcai_commit(),
        "python": platform.python_version(),
    }
