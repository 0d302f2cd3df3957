"""Numeric precision: the fastest stable default per device, and what each
choice means for autocast, TF32 and loss scaling.

fp32: fp32 weights and math, TF32 off. tf32: fp32 weights, TF32 matmuls and
convolutions (NVIDIA only). 32-true: fp32 weights with TF32 math where the
GPU has it, plain fp32 elsewhere (AMD, CPU): what Lightning's default 32-true
gives inside NGC's PyTorch images, the seed paper's vision setting; it
resolves to tf32 or fp32 and is recorded as such. bf16-mixed / fp16-mixed:
fp32 weights under autocast. bf16-true: weights, gradients and optimizer
state in bf16 (LitGPT pretraining only, as the paper's).
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from hpcai.errors import UsageError

PRECISIONS = ("auto", "fp32", "tf32", "32-true", "bf16-mixed", "fp16-mixed", "bf16-true")


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 autocast is then faster than fp32 on CPU."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve(precision: str, device_type: str) -> str:
    import torch

    if precision not in PRECISIONS:
        raise UsageError(
            f"unknown precision {precision!r}", f"choose one of: {', '.join(PRECISIONS)}"
        )
    if precision == "auto":
        if device_type == "cuda":
            return "bf16-mixed" if torch.cuda.is_bf16_supported() else "fp16-mixed"
        return "bf16-mixed" if cpu_has_native_bf16() else "fp32"
    if precision == "32-true":
        is_rocm = getattr(torch.version, "hip", None) is not None
        return "tf32" if device_type == "cuda" and not is_rocm else "fp32"
    if precision == "tf32" and device_type != "cuda":
        raise UsageError("tf32 needs an NVIDIA GPU", "use fp32 or bf16-mixed on CPU")
    return precision


def configure(precision: str, device_type: str, cudnn_benchmark: bool = True) -> None:
    """Global switches: TF32 matmuls only when asked for (or implied by mixed);
    cuDNN's autotuner unless the preset leaves it off (the paper's scripts do)."""
    import torch

    if device_type == "cuda":
        allow = precision != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
        torch.backends.cudnn.benchmark = bool(cudnn_benchmark)


def autocast(precision: str, device_type: str):
    import torch

    if precision == "bf16-mixed":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    if precision == "fp16-mixed":
        return torch.autocast(device_type, dtype=torch.float16)
    return contextlib.nullcontext()


def grad_scaler(precision: str, device_type: str):
    """fp16 needs loss scaling; bf16 and fp32 do not."""
    import torch

    enabled = precision == "fp16-mixed"
    return torch.amp.GradScaler(device_type, enabled=enabled)
