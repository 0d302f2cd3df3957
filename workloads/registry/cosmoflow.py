"""CosmoFlow training, MLPerf HPC's scientific workload (workloads/cosmoflow.py).

It lives in the `cv` image family: it needs PyTorch and nothing else, which
every cv image already carries, so a `science` family would be another
image of the same stack (gigabytes to build, sign and pull) for one workload.
"""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.workloads.declaration import CPU_SHORT_WINDOWS, CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.params import TrainParams, param

@dataclass(frozen=True)
class CosmoFlowParams(TrainParams):
    cube: int = param(128, flag="--cube", type="int", choices=(64, 128, 256),
                      help="edge of the input cube in voxels (SAIH's data augment; 128: MLPerf HPC's)")
    width_mult: float = param(1.0, flag="--width-mult", type="float", min=0, min_open=True,
                              help="multiplies every layer's filters and units (SAIH's model augment; "
                                   "1: the reference)")
    depth_mult: int = param(1, flag="--depth-mult", type="int", min=1,
                            help="convolutions per stage before each pooling (SAIH's model augment; "
                                 "1: the reference)")
    dropout: float = 0.5  # the reference's (cosmoflow/configs/cosmo.yaml)
    channels: int = 4  # input channels of a sample: the reference's four redshifts
    base_lr: float = 0.001  # lr for base_batch_size samples per step, scaled linearly
    base_batch_size: int = 64


# The reference implementation: paths below are in this repository and commit.
UPSTREAM = "mlcommons/hpc@2c627d4"
_CONFIG = "cosmoflow/configs/cosmo.yaml"
_MODEL = "cosmoflow/models/cosmoflow.py"
_ARCH = {"cube": 128, "width_mult": 1.0, "depth_mult": 1, "dropout": 0.5}

PAPER = Preset(
    "paper",
    "MLPerf HPC's CosmoFlow (mlcommons/hpc reference): 128^3 x 4 cubes, batch 4 per GPU, fp32 "
    "(TF32 math on NVIDIA), SGD momentum 0.9, lr 0.001 per 64 of global batch, every GPU; "
    "1 warm-up + 10 x 50 steps",
    params={"batch_size": 4, **_ARCH, "precision": "32-true", "channels_last": False, "compile": False,
            "cudnn_benchmark": True, "base_lr": 0.001, "base_batch_size": 64},
    protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
    kind="paper",
    upstream=UPSTREAM,
    sources={
        "batch_size": f"batch_size 4 per rank ({_CONFIG}:16)",
        "cube": f"sample_shape [128, 128, 128, 4] ({_CONFIG}:15)",
        "width_mult": f"conv_size 32, fc1_size 128, fc2_size 64 ({_CONFIG}:27-29)",
        "depth_mult": f"one Conv3D per pooling, n_conv_layers 5 ({_MODEL}:43-72)",
        "dropout": f"dropout 0.5 ({_CONFIG}:32)",
        "precision": (f"no mixed precision in {_CONFIG} or cosmoflow/train.py: fp32 Keras, which "
                      "TensorFlow runs in TF32 on NVIDIA GPUs since Ampere; 32-true is the same"),
        "channels_last": ("ours: NCDHW, PyTorch's default (the reference's Keras layers are channels-last, "
                          f"{_CONFIG}:15, a layout TensorFlow's cuDNN path transposes)"),
        "compile": "no XLA (jit_compile) in cosmoflow/train.py",
        "cudnn_benchmark": ("ours: TensorFlow autotunes cuDNN convolutions by default "
                            "(TF_CUDNN_USE_AUTOTUNE); cudnn.benchmark is PyTorch's counterpart"),
        "base_lr": f"SGD momentum 0.9, base_lr 0.001, linear scaling ({_CONFIG}:34-41)",
        "base_batch_size": f"base_batch_size 64 ({_CONFIG}:42)",
        "protocol": ("ours: the reference trains to a target MAE over 128 epochs of 524288 samples "
                     f"({_CONFIG}:13,17); 1 warm-up + 10 measured epochs of 50 steps, as the other workloads"),
        "gpus": "one rank per GPU, 8 per node (cosmoflow/scripts/train_cgpu.sh:3-4,17)",
    },
    known_differences=(
        "a PyTorch port with DDP; the reference is TensorFlow/Keras with Horovod",
        "synthetic cubes kept on the device; the reference reads gzip TFRecords through tf.data "
        "(cosmoflow/data/cosmo.py)",
        "no validation pass and no learning-rate warm-up or decay (a fixed rate over the few measured steps)",
    ),
)

WORKLOAD = Workload(
    name="cosmoflow",
    summary="CosmoFlow training (MLPerf HPC's 3D CNN, PyTorch port): synthetic 128^3 x 4 cubes on the "
            "device, 4 cosmological parameters, MSE, SGD",
    unit="samples",
    impls={"pytorch": Impl("cosmoflow", "torch", honours=("precision", "channels_last", "compile"),
                           flop_model="cosmoflow:flops_per_sample", in_run="epochs")},
    params=CosmoFlowParams,
    order=40,
    presets={
        "paper": PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best: bf16-mixed, channels-last (NDHWC), torch.compile, fused SGD, the largest "
            "batch that fits, every GPU; the reference's 128^3 cubes and 1 warm-up + 10 x 50 steps",
            params={"batch_size": "auto", "batch_search_start": 8, **_ARCH, "precision": "auto",
                    "channels_last": True, "compile": True, "cudnn_benchmark": True,
                    "fused_optimizer": True},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
            kind="fast", sources={"all": "ours: hpcai's best honest configuration (docs/concepts/presets.md)"},
        ),
        "short": Preset(
            "short",
            "the reference model on 64^3 cubes, batch 2, few steps: about a minute on a 2-core CPU",
            params={"batch_size": 2, **_ARCH, "cube": 64},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 3}, windows=CPU_SHORT_WINDOWS),
        "tiny": Preset(
            "tiny",
            "32^3 cubes, a quarter of the width, batch 2: seconds on CPU, for tests",
            params={"batch_size": 2, **_ARCH, "cube": 32, "width_mult": 0.25},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2}, windows=CPU_TINY_WINDOWS),
    },
    cpu_default_preset="tiny",
    data_format="npy",
    vary_params=("cube",),
)
