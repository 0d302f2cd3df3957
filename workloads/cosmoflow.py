"""CosmoFlow training in PyTorch: the MLPerf HPC reference model, DDP across
processes, synthetic cubes made once and kept on the device, SGD with
momentum, mean squared error on the four cosmological parameters.

The model is a port of the reference's Keras model, mlcommons/hpc@2c627d4
cosmoflow/models/cosmoflow.py:43-87 (build_model) with its configuration
cosmoflow/configs/cosmo.yaml:15-51:
- five stages of Conv3D(kernel 3, padding "same") + LeakyReLU + MaxPool3D(2),
  the first with 32 filters, each next one doubling them (:63-72);
- Flatten, Dense(128) + LeakyReLU + Dropout(0.5), Dense(64) + LeakyReLU +
  Dropout(0.5) (:76-81), Dense(4, tanh) scaled by 1.2 (:84-85; layers.py scale_1p2);
- LeakyReLU at Keras's default slope 0.3; Glorot-uniform kernels and zero
  biases, Keras's defaults; input 128^3 voxels x 4 redshift channels as
  log(1 + counts) (data/cosmo.py:70-72, apply_log True in cosmo.yaml:19).

SAIH's two knobs scale it: the cube edge (data augment: 64, 128, 256) and
the model's width and depth multipliers (model augment): width multiplies
every layer's filters and units; depth puts that many convolutions in each
stage before its pooling (1: the reference).
"""
from __future__ import annotations

from hpcai.errors import UsageError
from hpcai.workloads import flops
from hpcai.workloads.torch_trainer import TorchTrainer
from hpcai.workloads.registry.cosmoflow import CosmoFlowParams

# The reference's model (cosmoflow/models/cosmoflow.py:43-49, configs/cosmo.yaml:22-32).
# The reference's layers; its input channels and dropout are the params' defaults.
REFERENCE = {"channels": CosmoFlowParams.channels, "conv_size": 32, "stages": 5, "kernel_size": 3,
             "fc1_size": 128, "fc2_size": 64, "target_size": 4, "dropout": CosmoFlowParams.dropout,
             "leaky_slope": 0.3}


def architecture(params: dict) -> dict:
    """The layer sizes for these parameters (cube, width_mult, depth_mult), checked."""
    p = CosmoFlowParams.from_dict(params)
    cube, width, depth = p.cube, p.width_mult, p.depth_mult
    pooled = 2 ** REFERENCE["stages"]
    if not isinstance(cube, int) or isinstance(cube, bool) or cube < pooled or cube % pooled:
        raise UsageError(f"cube {cube!r} cannot pass the model's {REFERENCE['stages']} halvings",
                         f"use a multiple of {pooled}: 64, 128 (MLPerf HPC's) or 256")
    if not isinstance(width, (int, float)) or isinstance(width, bool) or not width > 0:
        raise UsageError(f"width multiplier {width!r} is not a positive number", "use e.g. 0.5, 1 or 2")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise UsageError(f"depth multiplier {depth!r} is not a whole number of at least 1",
                         "use 1 (the reference), 2, 3, ...")
    dropout = p.dropout
    if not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise UsageError(f"dropout {dropout!r} is not a fraction in [0, 1)", "the reference's is 0.5")
    filters = [max(1, round(REFERENCE["conv_size"] * 2 ** i * width)) for i in range(REFERENCE["stages"])]
    return {
        "cube": cube, "width_mult": float(width), "depth_mult": depth,
        "filters": filters, "convs_per_stage": depth,
        "flat": filters[-1] * (cube // pooled) ** 3,  # what the last pooling leaves, flattened
        "fc_sizes": [max(1, round(REFERENCE["fc1_size"] * width)), max(1, round(REFERENCE["fc2_size"] * width))],
        "dropout": float(dropout),
        "channels": p.channels,  # as the dataset's shape check reads it (datasets.sample_shape)
        **{k: REFERENCE[k] for k in ("kernel_size", "target_size", "leaky_slope")},
    }


def build_model(arch: dict):
    """The reference's Sequential model as a torch.nn.Sequential."""
    import torch
    from torch import nn

    class ScaledTanh(nn.Module):
        """Dense(tanh) then x1.2 (the reference's scale_1p2): targets in [-1, 1] stay reachable."""

        def forward(self, x):
            return 1.2 * torch.tanh(x)

    layers, channels = [], arch["channels"]
    slope = arch["leaky_slope"]
    drop = arch["dropout"]
    for filters in arch["filters"]:
        for _ in range(arch["convs_per_stage"]):
            layers += [nn.Conv3d(channels, filters, arch["kernel_size"], padding="same"), nn.LeakyReLU(slope)]
            channels = filters
        layers.append(nn.MaxPool3d(2))
    fc1, fc2 = arch["fc_sizes"]
    layers += [nn.Flatten(), nn.Linear(arch["flat"], fc1), nn.LeakyReLU(slope), nn.Dropout(drop),
               nn.Linear(fc1, fc2), nn.LeakyReLU(slope), nn.Dropout(drop),
               nn.Linear(fc2, arch["target_size"]), ScaledTanh()]
    model = nn.Sequential(*layers)
    for layer in model:
        if isinstance(layer, (nn.Conv3d, nn.Linear)):  # Keras's initialisers
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return model


def flops_per_sample(params: dict, batch: int = 2) -> dict:
    """The FLOP model (declared in registry/cosmoflow.py): the model counted at the
    dispatcher (torch.utils.flop_counter) over one forward and one forward+backward
    on the meta device, as the other vision workloads are. A sample is one cube."""
    import torch

    arch = architecture(params)
    cube = arch["cube"]
    with torch.device("meta"):
        model = build_model(arch)
        cubes = torch.empty(batch, arch["channels"], cube, cube, cube)
    forward = flops.count_torch_work(lambda: model(cubes))
    train = flops.count_torch_work(lambda: model(cubes).float().sum().backward())
    return {
        # The trainer's keys (per_image): here one image is one cube of 4 channels.
        "forward_per_image": forward["flops"] / batch,
        "train_per_image": train["flops"] / batch,
        "unit": "samples (one cube)",
        "method": "torch.utils.flop_counter.FlopCounterMode, one forward+backward on the meta device",
        "train_bytes_per_image": train["bytes"] / batch,
        "bytes_method": flops.BYTES_METHOD,
    }


class CosmoFlow(TorchTrainer):
    unit = "samples"

    def __init__(self, spec: dict, ctx):
        import torch

        super().__init__(spec, ctx)
        self.arch = architecture(self.params)
        # NDHWC (channels_last_3d) where asked; NCDHW, the reference's layout in PyTorch, otherwise.
        self.channels_last = bool(self.p.channels_last or False)
        self.memory_format = torch.channels_last_3d if self.channels_last else torch.contiguous_format
        model = build_model(self.arch).to(ctx.device, memory_format=self.memory_format).train()
        self.cubes = self.targets = None
        self.setup(model)

    def make_inputs(self, batch_size: int | None) -> None:
        import torch

        if batch_size is None:
            self.cubes = self.targets = None
            self.pipeline = None
            return
        if self.p.data:  # shards of cubes from storage (--data), timed per batch
            from hpcai.workloads.input_pipeline import InputPipeline

            self.pipeline = InputPipeline(self.spec, self.ctx, batch_size,
                                          memory_format=self.memory_format)
            return
        cube, device = self.arch["cube"], self.ctx.device
        # log(1 + counts), as the reference feeds its particle counts (apply_log).
        counts = torch.rand(batch_size, self.arch["channels"], cube, cube, cube, device=device).mul_(100)
        self.cubes = counts.log1p_().contiguous(memory_format=self.memory_format)
        # The four parameters, normalised to [-1, 1] as in the reference's dataset.
        self.targets = torch.rand(batch_size, self.arch["target_size"], device=device).mul_(2).sub_(1)

    def compute_loss(self):
        import torch.nn.functional as F

        if self.pipeline is not None:
            self.cubes, self.targets = self.pipeline.next()
        return F.mse_loss(self.model(self.cubes).float(), self.targets)

    def make_optimizer(self, parameters):
        import torch

        return torch.optim.SGD(parameters, lr=0.0, momentum=0.9, fused=self.fused_optimizer or None)

    def learning_rate(self) -> float:
        # The reference's linear scaling: base_lr per base_batch_size of global batch.
        base = float(self.p.base_lr)
        per = int(self.p.base_batch_size)
        return float(self.p.lr or base * self.batch_size * self.ctx.world_size / per)

    def count_flops(self) -> dict:
        return flops_per_sample(self.params)

    def describe(self) -> dict:
        cube = self.arch["cube"]
        return {
            "model": "CosmoFlow (MLPerf HPC reference, mlcommons/hpc cosmoflow/models/cosmoflow.py), PyTorch port",
            "architecture": self.arch,
            "input_shape": [self.arch["channels"], cube, cube, cube],
            "cube": cube,
            "channels_last": self.channels_last,
            "optimizer": "SGD(momentum=0.9)",
            "loss": "mse",
            **self.describe_training(),
        }


def build(spec: dict, ctx) -> CosmoFlow:
    return CosmoFlow(spec, ctx)
