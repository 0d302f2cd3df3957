"""Process placement: one process per GPU under torchrun (or one on CPU).

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK
(the node's rank across nodes); without it this is a single process. On CPU
the same path runs with gloo.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from hpcai.errors import WorkloadError
from hpcai.provenance import cpu_model, threads_per_process, usable_cpus


@dataclass
class Context:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device_type: str  # "cuda" | "cpu"
    device: object  # torch.device
    backend: str | None  # "nccl" | "gloo" | None when single process
    threads: int
    hostname: str
    node_rank: int = 0  # torchrun's GROUP_RANK: which node of a multi-node run

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def is_node_leader(self) -> bool:
        """Local rank 0 owns the node's telemetry and writes its result."""
        return self.local_rank == 0


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def init(device_request: str = "auto") -> Context:
    import torch

    rank = _env_int("RANK", 0)
    world = _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)

    if device_request == "auto":
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device_type = device_request
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise WorkloadError(
                # The launcher plans a GPU run from --device cuda or from the GPUs it saw itself.
                "this run is planned on the GPUs (--device cuda, or --device auto and the launcher "
                "saw GPUs), but PyTorch sees none",
                "check the driver, CUDA_VISIBLE_DEVICES and that this PyTorch is a GPU build, "
                "or run with --device cpu",
            )
        if local_rank >= torch.cuda.device_count():
            raise WorkloadError(
                f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible)",
                "ask for fewer GPUs with --gpus",
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")

    # Share the cores out so ranks on one CPU node do not oversubscribe it.
    threads = threads_per_process(local_world)
    if device_type == "cpu":
        torch.set_num_threads(threads)

    backend = None
    if world > 1:
        import torch.distributed as dist

        backend = "nccl" if device_type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device_type == "cuda" else {}
        dist.init_process_group(backend=backend, **kwargs)
    return Context(
        rank, world, local_rank, local_world, device_type, device, backend, threads,
        socket.gethostname(), _env_int("GROUP_RANK", 0),
    )


def device_name(ctx: Context, discovery=None) -> str:
    """What this process computes on: its GPU's name, else the CPU model."""
    if ctx.device_type == "cuda" and ctx.device is not None:
        import torch

        return torch.cuda.get_device_name(ctx.device)
    if ctx.device_type == "cuda" and discovery is not None and discovery.gpus:
        return discovery.gpus[0].info().name  # one process drives the node's GPUs
    return cpu_model()


def single(device_request: str = "auto") -> Context:
    """One process that drives every GPU itself; imports no framework."""
    device_type = device_request
    if device_request == "auto":
        from hpcai.gpu import detect_vendor

        device_type = "cuda" if detect_vendor() else "cpu"
    return Context(0, 1, 0, 1, device_type, None, None, usable_cpus(), socket.gethostname())


def barrier(ctx: Context) -> None:
    if ctx.distributed:
        import torch.distributed as dist

        if ctx.device_type == "cuda":
            dist.barrier(device_ids=[ctx.local_rank])
        else:
            dist.barrier()


def gather(ctx: Context, obj) -> list:
    """Every rank's object, in rank order, on every rank."""
    if not ctx.distributed:
        return [obj]
    import torch.distributed as dist

    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def shutdown(ctx: Context) -> None:
    if ctx.distributed:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
