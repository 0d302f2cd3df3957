"""ResNet-50 training: PyTorch (workloads/resnet50.py) and TensorFlow (workloads/resnet50_tf.py)."""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.workloads.declaration import CPU_SHORT_WINDOWS, CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.registry._seed_paper import (
    _CUDNN, _CV_GPUS_SOURCE, _CV_PRECISION_SOURCE, _CV_PROTOCOL_SOURCE, _FAST_SOURCE, _NO_COMPILE, _SEARCH,
)
from hpcai.workloads.params import TrainParams


@dataclass(frozen=True)
class ResNet50Params(TrainParams):
    image_size: int = 224
    num_classes: int = 1000
    cpu_replicas: int = 1  # TensorFlow on CPU: MirroredStrategy replicas (workloads/resnet50_tf.py)


RESNET50_PAPER = Preset(
    "paper",
    "the seed paper's workload (RRZE-HPC/hpc-ai-perf-bench): 224x224, TF32 math on fp32 "
    "weights (fp32 on AMD), NCHW, no compile, Adam 1e-4, one GPU, 1 warm-up + 10 x 50 steps; "
    "batch: the largest that fits (the upstream states none)",
    params={"batch_size": "auto", "batch_search_start": 256, "image_size": 224,
            "num_classes": 1000, "precision": "32-true", "channels_last": False, "compile": False,
            "cudnn_benchmark": False, "optimizer": "adam", "lr": 1e-4},
    protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
    kind="paper",
    gpus=1,
    sources={
        "batch_size": ("ours: the upstream states no ResNet-50 batch (computer_vision/README.md; "
                       "main_resnet.py:93 defaults to 16,32,64): the largest that fits, found by "
                       f"{_SEARCH}"),
        "image_size": "224 (computer_vision/main_resnet.py:106)",
        "num_classes": "torchvision resnet50(), 1000 classes (computer_vision/resnet/model/lit_model.py:15)",
        "precision": _CV_PRECISION_SOURCE,
        "channels_last": ("NCHW, PyTorch's default: random NCHW images, no memory-format change "
                          "(computer_vision/main_resnet.py:19-37)"),
        "compile": _NO_COMPILE,
        "cudnn_benchmark": _CUDNN,
        "optimizer": "Adam (computer_vision/resnet/model/lit_model.py:40)",
        "lr": "1e-4 (computer_vision/resnet/model/lit_model.py:40)",
        "protocol": _CV_PROTOCOL_SOURCE,
        "gpus": _CV_GPUS_SOURCE,
    },
    known_differences=(
        "upstream collates 256 random images per step in a DataLoader; hpcai keeps one batch on "
        "the device (a few % in hpcai's favour)",),
)


WORKLOAD = Workload(
    name="resnet50",
    summary="ResNet-50 training (torchvision), synthetic 224x224 images on the device, SGD",
    unit="images",
    impls={"pytorch": Impl("resnet50", "torch", honours=("precision", "channels_last", "compile"),
                           libraries=("torchvision",), flop_model="resnet50:flops_per_image", in_run="epochs"),
           # One process; tf.distribute.MirroredStrategy drives every GPU of the node.
           "tensorflow": Impl("resnet50_tf", "tensorflow", process_model="single",
                              honours=("precision", "compile"), upstream=False,
                              in_run="epochs")},
    params=ResNet50Params,
    order=10,
    presets={
        "paper": RESNET50_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best: bf16-mixed, channels-last, torch.compile, fused SGD, the largest "
            "batch that fits, every GPU; the paper's 224x224 and 1 warm-up + 10 x 50 steps",
            params={"batch_size": "auto", "batch_search_start": 256, "image_size": 224,
                    "num_classes": 1000, "precision": "auto", "channels_last": True,
                    "compile": True, "cudnn_benchmark": True, "fused_optimizer": True},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "short": Preset(
            "short",
            "paper input size, few steps: about a minute on a 2-core CPU",
            params={"batch_size": 8, "image_size": 224, "num_classes": 1000},
            protocol={"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 3}, windows=CPU_SHORT_WINDOWS),
        "tiny": Preset(
            "tiny",
            "64x64 images, batch 4, a few steps: seconds on CPU, for tests",
            params={"batch_size": 4, "image_size": 64, "num_classes": 100},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2}, windows=CPU_TINY_WINDOWS),
    },
    data_format="jpeg",
    vary_params=("image_size",),
)
