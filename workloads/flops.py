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


BYTES_METHOD = ("upper bound of DRAM traffic: the bytes of every operator's tensor inputs and outputs, "
                "counted at the dispatcher in the same meta-device pass as the FLOPs (views move nothing and "
                "are left out); no fusion and no cache reuse assumed, so real traffic is lower")


def count_torch_work(fn) -> dict:
    """FLOPs and bytes moved of what fn() runs, in one pass.

    FLOPs: PyTorch's FlopCounterMode counts matrix products, convolutions and
    attention (a multiply-add is 2 FLOPs), forward and backward; elementwise
    work and the optimizer are left out, as in published model FLOPs.
    Bytes: every operator's inputs and outputs (see BYTES_METHOD)."""
    from torch.utils.flop_counter import FlopCounterMode

    bytes_mode = _bytes_mode()
    with FlopCounterMode(display=False) as counter, bytes_mode:
        fn()
    return {"flops": int(counter.get_total_flops()), "bytes": int(bytes_mode.bytes)}


def count_torch_flops(fn) -> int:
    """FLOPs of what fn() runs (count_torch_work without the bytes)."""
    return count_torch_work(fn)["flops"]


def _bytes_mode():
    """A dispatch mode adding up the bytes of each operator's tensors."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def tensor_bytes(tree) -> int:
        return sum(t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor))

    def is_view(func) -> bool:
        # A view returns an alias of its input without writing: no data moves.
        # In-place ops also return an alias, but write it (is_write): they count.
        returns = func._schema.returns
        return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)

    class BytesMode(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bytes = 0
            self.ops = []  # (operator, bytes), for tests and curiosity

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not is_view(func):
                moved = tensor_bytes((args, kwargs or {})) + tensor_bytes(out)
                self.bytes += moved
                self.ops.append((str(func), moved))
            return out

    return BytesMode()


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

    forward_work, train_work = count_torch_work(forward), count_torch_work(train)
    return {
        "forward_per_image": forward_work["flops"] / batch,
        "train_per_image": train_work["flops"] / batch,
        "method": "torch.utils.flop_counter.FlopCounterMode, one forward+backward on the meta device",
        "train_bytes_per_image": train_work["bytes"] / batch,
        "bytes_method": BYTES_METHOD,
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


KERAS_BYTES_METHOD = ("analytic upper bound of DRAM traffic: each Keras layer's input and output activations "
                      "and its weights (over the batch), in the layer's compute dtype, x3 for forward+backward; "
                      "no fusion (XLA fuses) and no cache reuse assumed, so real traffic is lower")

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def keras_forward_bytes(model, batch: int) -> float:
    """Bytes one image's forward pass moves through a Keras model's layers:
    every layer reads its inputs and weights and writes its outputs."""
    total = 0.0
    for layer in _keras_layers(model):
        if type(layer).__name__ == "InputLayer":
            continue
        size = _DTYPE_BYTES.get(str(getattr(layer, "compute_dtype", "float32")), 4)
        activations = sum(_per_sample(t) for t in _flat(layer.input)) + sum(_per_sample(t) for t in _flat(layer.output))
        weights = sum(_elements(w.shape) * _DTYPE_BYTES.get(str(w.dtype).replace("tf.", "").replace("'", ""), 4)
                      for w in layer.weights)
        total += activations * size + weights / batch
    return total


def _flat(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _per_sample(tensor) -> int:
    return _elements(tuple(tensor.shape)[1:])


def keras_image_model_flops(model, batch: int = 1) -> dict:
    forward = 2 * keras_forward_macs(model)
    return {
        "forward_per_image": float(forward),
        # Backward computes gradients for activations and weights: 2x forward.
        "train_per_image": 3.0 * forward,
        "method": "analytic: 2 x multiply-adds of the Keras Conv2D/Dense layers, x3 for forward+backward",
        "train_bytes_per_image": 3.0 * keras_forward_bytes(model, batch),
        "bytes_method": KERAS_BYTES_METHOD,
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

# The run's precision -> the table's precision column: hpcai.devices.PRECISION_PEAK.


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
    from hpcai.devices import peak_precision

    key = peak_precision(precision)
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
