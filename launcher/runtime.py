"""Runtimes: how the measurement entrypoint is started.

`host` runs it with this Python (the embedded default); one process per GPU
goes through torchrun. The container runtime plugs in here later, wrapping
the same command.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from hpcai.errors import RuntimeNotFoundError
from hpcai.provenance import usable_cpus

ENTRYPOINT = ["-m", "hpcai.workloads", "run"]


EXTRAS = {"torch": "cv", "torchvision": "cv", "tensorflow": "tf", "litgpt": "llm",
          "sglang": "serve"}


def check_host_frameworks(framework: str = "torch") -> None:
    """Fail before any cap is set when this Python cannot run the workload."""
    if importlib.util.find_spec(framework) is None:
        extra = EXTRAS.get(framework, "cv")
        raise RuntimeNotFoundError(
            f"{framework} is not installed for {sys.executable}",
            f"install the workload stack with `pip install 'hpcai[{extra}]'`",
        )


def entrypoint_command(spec_path: str, nproc: int, python: str = sys.executable) -> list[str]:
    if nproc <= 1:
        return [python, *ENTRYPOINT, "--spec", spec_path]
    # torchrun: one process per GPU (or per CPU share); --standalone picks a free port.
    return [python, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", *ENTRYPOINT, "--spec", spec_path]


def child_environment(vendor: str | None, gpu_indices: list[int] | None,
                      device_type: str, nproc: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # Make cuda:N the same GPU as NVML index N (CUDA's default order differs).
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if device_type == "cuda" and gpu_indices is not None:
        visible = ",".join(str(i) for i in gpu_indices)
        var = "ROCR_VISIBLE_DEVICES" if vendor == "amd" else "CUDA_VISIBLE_DEVICES"
        env[var] = visible
    if "OMP_NUM_THREADS" not in env:
        # Otherwise torchrun forces 1 thread per process, with a banner; share the cores.
        env["OMP_NUM_THREADS"] = str(max(1, usable_cpus() // max(1, nproc)))
    return env
