"""The MLP example's declaration: parameters, presets, implementation. Imports
no framework: hpcai's launcher reads it to list, check and plan runs."""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.workloads.declaration import CPU_SHORT_WINDOWS, CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.params import TrainParams, param


@dataclass(frozen=True)
class MlpParams(TrainParams):
    """The MLP's parameters: every default here, once. Fields with a flag are
    options of `hpcai-launch mlp-example`."""

    features: int = 256  # inputs per sample
    num_classes: int = 10
    hidden: int = param(1024, flag="--hidden", type="int", min=1,
                        help="units per hidden layer")
    layers: int = param(4, flag="--layers", type="int", min=1,
                        help="hidden layers")


WORKLOAD = Workload(
    name="mlp-example",
    summary="an example plugin workload: an MLP trained on synthetic samples (examples/plugin-workload)",
    unit="samples",
    impls={"pytorch": Impl("hpcai_example_mlp.train", "torch", honours=("precision", "compile"),
                           flop_model="hpcai_example_mlp.train:flops_per_sample",
                           in_run="epochs", upstream=False)},
    params=MlpParams,
    presets={
        "fast": Preset("fast", "4 x 4096 units, batch 1024, bf16 where supported, compiled",
                       params={"batch_size": 1024, "hidden": 4096, "layers": 4, "precision": "auto",
                               "compile": True},
                       protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
                       kind="fast"),
        "short": Preset("short", "4 x 1024 units, batch 256: seconds on a 2-core CPU",
                        params={"batch_size": 256},
                        protocol={"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 10}, windows=CPU_SHORT_WINDOWS),
        "tiny": Preset("tiny", "2 x 64 units, batch 16: a second on CPU, for tests",
                       params={"batch_size": 16, "features": 32, "hidden": 64, "layers": 2},
                       protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 4}, windows=CPU_TINY_WINDOWS),
    },
    cpu_default_preset="short",
    gpu_default_preset="fast",
    order=200,
)
