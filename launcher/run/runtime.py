"""Runtimes: how the measurement entrypoint is started.

`host` runs it with this Python (the embedded default); one process per GPU
goes through torchrun. `apptainer` (launcher/run/container.py) wraps the same
command to run it inside the workload's image. The choice is recorded in the
spec's `runtime`, and everything after planning follows the spec.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from hpcai.errors import RuntimeNotFoundError, UsageError
from hpcai.provenance import threads_per_process
from hpcai.spec import RunSpec
from hpcai.install import install_hint

RUNTIMES = ("auto", "host", "apptainer")
HOST = {"kind": "host", "image": None}

ENTRYPOINT = ["-m", "hpcai.workloads", "run"]


EXTRAS = {"torch": "cv", "torchvision": "cv", "tensorflow": "tf", "litgpt": "llm",
          "sglang": "serve"}


def check_host_frameworks(framework: str = "torch") -> None:
    """Fail before any cap is set when this Python cannot run the workload."""
    if importlib.util.find_spec(framework) is None:
        extra = EXTRAS.get(framework, "cv")
        raise RuntimeNotFoundError(
            f"{framework} is not installed for {sys.executable}",
            f"install the workload stack: {install_hint(extra)}",
        )


def entrypoint_command(spec_path: str, nproc: int, python: str = sys.executable,
                       slurm: dict | None = None) -> list[str]:
    if slurm and slurm["nodes"] > 1:
        # Across nodes: every node's torchrun meets at the first node (c10d).
        return [python, "-m", "torch.distributed.run", f"--nnodes={slurm['nodes']}",
                f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={slurm['rdzv_endpoint']}", f"--rdzv-id={slurm['rdzv_id']}",
                *ENTRYPOINT, "--spec", spec_path]
    if nproc <= 1:
        return [python, *ENTRYPOINT, "--spec", spec_path]
    # torchrun: one process per GPU (or per CPU share); --standalone picks a free port.
    return [python, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", *ENTRYPOINT, "--spec", spec_path]


def child_environment(vendor: str | None, gpu_indices: list[int] | None,
                      device_type: str, nproc: int,
                      visible_ids: list[str] | None = None) -> dict[str, str]:
    from hpcai.launcher.run.visibility import workload_environment

    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # Only matters for a spec without visible_ids: then cuda:N is NVML index N.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if device_type == "cuda" and gpu_indices is not None:
        # UUIDs name the same GPUs whatever the job's cgroup renumbered.
        ids = visible_ids or [str(i) for i in gpu_indices]
        workload_environment(env, vendor, ids)
    if "OMP_NUM_THREADS" not in env:
        # Otherwise torchrun forces 1 thread per process, with a banner; share the cores.
        env["OMP_NUM_THREADS"] = str(threads_per_process(nproc))
    return env


def select(requested: str, site: dict, vendor: str | None, family: str,
           image: str | None = None, log=lambda message: None, plugin: str | None = None) -> dict:
    """The spec's runtime entry. auto: Apptainer when it is installed and the
    workload's image is in the images folder, else the host. plugin: the name of a
    workload from an installed package, which hpcai's images do not carry: auto
    runs it on the host (an --image built with it may still be named)."""
    if requested not in RUNTIMES:
        raise UsageError(f"unknown runtime {requested!r}", f"choose one of: {', '.join(RUNTIMES)}")
    if image and requested == "host":
        raise UsageError("--image needs the apptainer runtime", "drop --runtime host")
    from hpcai.launcher.run import container

    if requested == "auto" and plugin and not image:
        log(f"runtime: host ({plugin} comes from an installed package, which hpcai's images "
            "do not carry; name an image built with it through --image to run it there)")
        return dict(HOST)
    if requested == "host" or (requested == "auto" and not image
                               and not container.auto_available(site, vendor, family)):
        return dict(HOST)
    return container.runtime_entry(site, vendor, family, requested=requested, image=image,
                                   log=log)


def command(spec: RunSpec, site: dict, spec_path: str) -> list[str]:
    inner = entrypoint_command(spec_path, spec.devices.nproc,
                               slurm=spec.slurm.to_json() if spec.slurm else None)
    if spec.runtime["kind"] == "host":
        return inner
    from hpcai.launcher.run import container

    return container.command(spec, site, spec_path, inner)


def environment(spec: RunSpec, site: dict) -> dict[str, str]:
    devices = spec.devices.to_json()
    vendor = None if devices["vendor"] == "auto" else devices["vendor"]
    env = child_environment(vendor, devices["gpu_indices"], devices["type"], devices["nproc"],
                            devices.get("visible_ids"))
    if spec.runtime["kind"] == "host":
        return env
    from hpcai.launcher.run import container

    return container.environment(env, site)


def check_ready(spec: RunSpec, framework: str) -> None:
    """Before any cap: the host must have the framework; an image carries its own."""
    if spec.runtime["kind"] == "host":
        check_host_frameworks(framework)
