"""FLOPs per unit of work, and the peak a GPU could deliver.

Every vision result carries the FLOPs one training step does per image, so
it also carries achieved TFLOP/s; where the GPU's peak is known, the fraction
of that peak too, with the peak's figure and source beside it.

PyTorch models are counted with torch.utils.flop_counter.FlopCounterMode over
one forward and backward pass of a copy built on the `meta` device: the same
operators as a real step, but no memory and no arithmetic, so it takes a
second even for Stable Diffusion at 512x512. Keras models are counted
analytically from their layer graph. Imports no framework at import time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# ---- counting -----------------------------------------------------------------


def count_torch_flops(fn) -> int:
    """FLOPs of what fn() runs, counted by PyTorch's FlopCounterMode.

    It counts matrix products, convolutions and attention (a multiply-add is
    2 FLOPs), forward and backward; elementwise work and the optimizer are
    left out, as in published model FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def torch_image_model_flops(build_model, image_size: int, batch: int = 2) -> dict:
    """Forward and training (forward + backward) FLOPs per image of a model
    that maps (N, 3, S, S) images to outputs, counted on the meta device."""
    import torch

    with torch.device("meta"):
        model = build_model()
        images = torch.empty(batch, 3, image_size, image_size)

    def forward():
        model(images)

    def train():
        model(images).float().sum().backward()

    return {
        "forward_per_image": count_torch_flops(forward) / batch,
        "train_per_image": count_torch_flops(train) / batch,
        "method": "torch.utils.flop_counter.FlopCounterMode, one forward+backward on the meta device",
    }


def keras_forward_macs(model) -> int:
    """Multiply-adds of one image's forward pass through a Keras model's
    convolution and dense layers (batch norm, activations and pooling are
    left out, as in the ResNet paper's 3.8e9 figure)."""
    macs = 0
    for layer in _keras_layers(model):
        kind = type(layer).__name__
        if kind in ("Conv2D", "DepthwiseConv2D"):
            kh, kw, cin_per_group, cout = (int(d) for d in layer.kernel.shape)
            _, h, w, _ = layer.output.shape
            macs += int(h) * int(w) * kh * kw * cin_per_group * cout
        elif kind == "Dense":
            fan_in, fan_out = (int(d) for d in layer.kernel.shape)
            macs += fan_in * fan_out
    return macs


def keras_image_model_flops(model) -> dict:
    forward = 2 * keras_forward_macs(model)
    return {
        "forward_per_image": float(forward),
        # Backward computes gradients for activations and weights: 2x forward.
        "train_per_image": 3.0 * forward,
        "method": "analytic: 2 x multiply-adds of the Keras Conv2D/Dense layers, x3 for forward+backward",
    }


def _keras_layers(model):
    for layer in model.layers:
        if hasattr(layer, "layers"):  # nested models
            yield from _keras_layers(layer)
        else:
            yield layer


# ---- peaks --------------------------------------------------------------------

# What a run's precision means for the peak it can reach: mixed precision does
# its matrix products in the half type; plain fp32 runs on the FP32 units (on
# AMD, FP32 matrix cores).
PRECISION_PEAK = {"bf16-mixed": "bf16", "bf16-true": "bf16", "fp16-mixed": "fp16", "tf32": "tf32",
                  "fp32": "fp32"}

_SPARSITY = "datasheet figures marked 'with sparsity' halved to dense"


@dataclass(frozen=True)
class GpuPeak:
    gpu: str
    pattern: str  # regular expression on the device name the driver reports
    tflops: dict  # precision -> dense TFLOP/s of one device (as the framework sees it)
    source: str
    url: str
    note: str = ""


# Dense (no structured sparsity) peak TFLOP/s per device. Order matters: the
# first pattern that matches the device name wins. Names are those the driver
# reports ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "AMD Instinct MI300X");
# the look-behind keeps Grace Hopper's "GH200", which this table leaves out,
# from passing for an H200.
GPU_PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak("H100 PCIe", r"(?<![A-Z])H100.*PCIe",
            {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5, "fp8": 1513.0},
            "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column)",
            "https://www.nvidia.com/en-us/data-center/h100/", _SPARSITY),
    GpuPeak("H100 NVL", r"(?<![A-Z])H100.*NVL",
            {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
            "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column)",
            "https://www.nvidia.com/en-us/data-center/h100/", _SPARSITY),
    GpuPeak("H100 SXM", r"(?<![A-Z])H100",
            {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
            "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column)",
            "https://www.nvidia.com/en-us/data-center/h100/", _SPARSITY),
    GpuPeak("H200 NVL", r"(?<![A-Z])H200.*NVL",
            {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
            "NVIDIA H200 Tensor Core GPU datasheet (H200 NVL column)",
            "https://www.nvidia.com/en-us/data-center/h200/", _SPARSITY),
    GpuPeak("H200 SXM", r"(?<![A-Z])H200",
            {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
            "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column)",
            "https://www.nvidia.com/en-us/data-center/h200/", _SPARSITY),
    GpuPeak("A100", r"A100",
            {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
            "NVIDIA A100 Tensor Core GPU datasheet (40GB and 80GB, PCIe and SXM)",
            "https://www.nvidia.com/en-us/data-center/a100/",
            "the datasheet's dense figures; PCIe and SXM share them"),
    GpuPeak("MI300X", r"MI300X",
            {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
            "AMD Instinct MI300X accelerator datasheet",
            "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
            "dense figures; fp32 is the FP32 matrix peak"),
    GpuPeak("MI250X (one GCD)", r"MI250X",
            {"fp32": 47.85, "bf16": 191.5, "fp16": 191.5},
            "AMD Instinct MI250X accelerator datasheet",
            "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html",
            "the datasheet gives the whole card (FP32 matrix 95.7, FP16/BF16 383 TFLOP/s); "
            "each of its two GCDs is one device, so half; no TF32"),
)


def match_gpu(device_name: str | None) -> GpuPeak | None:
    if not device_name:
        return None
    for peak in GPU_PEAKS:
        if re.search(peak.pattern, device_name, re.IGNORECASE):
            return peak
    return None


def peak_for(device_name: str | None, precision: str, devices: int) -> dict:
    """The node's peak TFLOP/s for this device and precision, with its source;
    where it is unknown, the figures are null and `reason` says why."""
    key = PRECISION_PEAK.get(precision, precision)
    entry = {"device": device_name, "gpu": None, "precision": key, "devices": devices,
             "tflops_per_device": None, "tflops_node": None, "source": None, "url": None,
             "note": None, "reason": None}
    peak = match_gpu(device_name)
    if peak is None:
        entry["reason"] = f"no known peak for {device_name or 'this device'}"
        return entry
    entry.update(gpu=peak.gpu, source=peak.source, url=peak.url, note=peak.note or None)
    per_device = peak.tflops.get(key)
    if per_device is None:
        entry["reason"] = f"the {peak.gpu} datasheet gives no {key} peak"
        return entry
    entry["tflops_per_device"] = per_device
    entry["tflops_node"] = per_device * devices if devices > 0 else None
    return entry


def fraction_of_peak(achieved_tflops: float | None, peak: dict | None) -> float | None:
    """Achieved over peak TFLOP/s for the whole node, or None when either is unknown."""
    if not achieved_tflops or not peak or not peak.get("tflops_node"):
        return None
    return achieved_tflops / peak["tflops_node"]
