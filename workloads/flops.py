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
# Peaks come from the device table (hpcai/devices/gpus.toml), the one source of
# datasheet figures; a CPU gets the table's vector-width estimate, labelled so.

# What a run's precision means for the peak it can reach: mixed precision does
# its matrix products in the half type; plain fp32 runs on the FP32 units (on
# AMD, FP32 matrix cores).
PRECISION_PEAK = {"bf16-mixed": "bf16", "bf16-true": "bf16", "fp16-mixed": "fp16", "tf32": "tf32",
                  "fp32": "fp32", "fp64": "fp64"}


def match_gpu(device_name: str | None):
    """The device table's entry for a reported name (exact match), or None."""
    from hpcai import devices

    return devices.lookup(device_name)


def _cpu_estimate(device_name: str | None) -> dict | None:
    """This host's CPU figures when device_name is its model name."""
    from hpcai.devices import cpu

    if not device_name:
        return None
    host = cpu.this_host()
    if host.get("model") and host["model"].strip() == device_name.strip() and host["peak_tflops_estimate"]:
        return host
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
        host = _cpu_estimate(device_name)
        if host is not None:
            # Beside the datasheet peaks, never in their place: fraction_of_peak stays null.
            entry["reason"] += " (a CPU: cpu_estimate has a peak estimated from its vector width)"
            entry["cpu_estimate"] = {k: host[k] for k in ("model", "cores", "threads", "clock_mhz", "caches",
                                                          "vector_isa", "peak_tflops_estimate", "estimate_method")}
        return entry
    entry.update(gpu=peak.model, source=peak.source, url=peak.url, note=peak.note or None)
    per_device = peak.tflops.get(key)
    if per_device is None:
        entry["reason"] = f"the {peak.model} datasheet gives no {key} peak"
        return entry
    entry["tflops_per_device"] = per_device
    entry["tflops_node"] = per_device * devices if devices > 0 else None
    return entry


def fraction_of_peak(achieved_tflops: float | None, peak: dict | None) -> float | None:
    """Achieved over peak TFLOP/s for the whole node, or None when either is unknown."""
    if not achieved_tflops or not peak or not peak.get("tflops_node"):
        return None
    return achieved_tflops / peak["tflops_node"]
