"""Stable Diffusion v2 training (workloads/sd2.py)."""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.workloads.declaration import CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.params import TrainParams, param
from hpcai.workloads.registry._seed_paper import (
    _CUDNN, _CV_GPUS_SOURCE, _CV_PROTOCOL_SOURCE, _FAST_SOURCE, _SEARCH,
)

@dataclass(frozen=True)
class SD2Params(TrainParams):
    image_size: int = 512
    model_size: str = "full"  # "full": SD 2's UNet, VAE and text encoder; "tiny": shrunk
    weights: str | None = param(
        flag="--weights", help="a local diffusers-format folder (unet/, vae/, text_encoder/) to load real "
                               "weights from; default: random weights, nothing downloaded")


SD2_PAPER = Preset(
    "paper",
    "the seed paper's workload: 512x512, fp16-mixed, the same UNet/VAE/OpenCLIP text encoder "
    "every step, AdamW 1e-4, one GPU, 1 warm-up + 10 x 50 steps; batch: the largest that fits "
    "(the upstream README's 192/224 cannot fit at 512x512)",
    params={"batch_size": "auto", "batch_search_start": 8, "image_size": 512,
            "model_size": "full", "precision": "fp16-mixed", "compile": False,
            "channels_last": False, "cudnn_benchmark": False},
    protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
    kind="paper",
    gpus=1,
    sources={
        "batch_size": ("ours: the README's 192 (H100) and 224 (MI300X) (computer_vision/"
                       "README.md:72,113,126) need about 200-400 GB of activations at 512x512 "
                       "without checkpointing (use_checkpoint: False, configs/train_SDv2.yaml:"
                       f"52-69), so they cannot be per-GPU batches: the largest that fits ({_SEARCH})"),
        "image_size": "512 (computer_vision/main_ldm.py:127)",
        "model_size": ("the SD2 UNet (865,910,724 parameters), VAE encoder and OpenCLIP ViT-H "
                       "text tower every step, v-prediction, no EMA (configs/train_SDv2.yaml:5-100)"),
        "precision": "16-mixed: use_fp16 True (computer_vision/main_ldm.py:144,196; "
                     "configs/train_SDv2.yaml:56)",
        "compile": "no torch.compile in computer_vision/main_ldm.py",
        "channels_last": "NCHW, PyTorch's default: no memory-format change in computer_vision/main_ldm.py",
        "cudnn_benchmark": _CUDNN,
        "protocol": _CV_PROTOCOL_SOURCE.replace("main_resnet.py:134,196", "main_ldm.py:159,199"),
        "gpus": _CV_GPUS_SOURCE,
    },
    known_differences=(
        "attention: the upstream uses xformers memory_efficient_attention (ldm/modules/"
        "attention.py:13-17); hpcai's images carry no xformers and use PyTorch's SDPA",),
)


WORKLOAD = Workload(
    name="sd2",
    summary="Stable Diffusion v2 training (diffusers): VAE and OpenCLIP text encoder frozen, "
            "UNet trained (v-prediction, AdamW), synthetic 512x512 images and prompts",
    unit="images",
    impls={"pytorch": Impl("sd2", "torch", honours=("precision", "channels_last", "compile"),
                     libraries=("diffusers", "transformers"), in_run="epochs")},
    params=SD2Params,
    order=30,
    presets={
        "paper": SD2_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best: bf16-mixed, torch.compile of the UNet and of the frozen VAE encoder "
            "and text tower, channels-last UNet and VAE, fused AdamW, SDPA attention, the largest "
            "batch that fits, every GPU; the paper's 512x512 and 1 warm-up + 10 x 50 steps. "
            "Expected about 1.1-1.5x the paper per GPU (bf16 against fp16, the frozen parts "
            "compiled), not 2x: the UNet's attention already runs SDPA in both. Unmeasured on a GPU: "
            "its first compile took over 165 s on an H100 (docs/how-to/selftest.md)",
            params={"batch_size": "auto", "batch_search_start": 8, "image_size": 512,
                    "model_size": "full", "precision": "auto", "compile": True, "channels_last": True,
                    "cudnn_benchmark": True, "fused_optimizer": True},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "tiny": Preset(
            "tiny",
            "shrunk UNet, VAE and text encoder on 64x64 images, batch 2: seconds on CPU, for tests",
            params={"batch_size": 2, "image_size": 64, "model_size": "tiny"},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2}, windows=CPU_TINY_WINDOWS),
    },
    cpu_default_preset="tiny",
)
