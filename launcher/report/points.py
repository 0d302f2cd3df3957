"""The report's shared vocabulary: workload names compared loosely, and a
published reference point. Both the result loader (load.py) and the reference
table (reference.py) use them, so they live below both."""
from __future__ import annotations

import re
from dataclasses import dataclass


def workload_key(name: str) -> str:
    """Names compared loosely: "vit-l16", "vit_l16" and "ViT-L16" are one workload."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


@dataclass(frozen=True)
class RefPoint:
    workload: str
    gpu: str
    cap_w: float
    throughput: float  # as published
    unit: str
    enforced: bool
    basis: str = "per_gpu"  # or node_4gpu: the published figure is a 4-GPU node's total
    gpus: int = 1  # GPUs the published figure covers
    precision: str = ""
    batch: str = ""
    request_mix: str = ""

    @property
    def per_gpu(self) -> float:
        """The published figure on the report's basis: per GPU."""
        return self.throughput / self.gpus
    published: str = ""  # the figure as the paper prints it ("1426.0"), shown unrounded
