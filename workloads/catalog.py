"""What workloads exist and their presets, without importing any framework.

The launcher reads this to list workloads, validate names and build run
specs; the entrypoint reads it to find the module that runs a workload.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.errors import UsageError

PROTOCOL_DEFAULTS = {
    "warmup_epochs": 1,  # discarded, as in the seed paper
    "epochs": 10,  # measured
    "sample_interval_s": 0.1,
}


# What a preset is for: `paper` reproduces the seed paper's public scripts
# (RRZE-HPC/hpc-ai-perf-bench) and is the only kind compared with its tables;
# `fast` is hpcai's best honest configuration; `test` presets are for checks.
PRESET_KINDS = {"paper": "comparable to the seed paper", "fast": "hpcai's best configuration",
                "test": "for quick checks and tests"}
UPSTREAM = "RRZE-HPC/hpc-ai-perf-bench@52d1f50"


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    params: dict  # workload parameters (batch_size, image_size, ...)
    protocol: dict  # warmup_epochs, epochs, steps_per_epoch
    kind: str = "test"  # a key of PRESET_KINDS
    # Where each setting comes from: an upstream file:line, or "ours: why" where
    # the upstream does not say (or cannot be right) and hpcai chose.
    sources: dict = field(default_factory=dict)
    # Settings that differ by GPU model or vendor, as the upstream's do:
    # {"H100": {"batch_size": 256}} matches the GPU's name; {"amd": {...}} its vendor.
    by_gpu: dict = field(default_factory=dict)
    gpus: int | None = None  # GPUs per run when --gpus is not given (None: all)
    # Differences from the upstream that hpcai cannot remove (another engine
    # version, a kernel library not in the images): recorded, not hidden.
    known_differences: tuple[str, ...] = ()

    def resolve(self, gpu_name: str | None = None, vendor: str | None = None) -> dict:
        """The parameters for this GPU: the preset's, then its vendor's, then its model's."""
        params = dict(self.params)
        if vendor and vendor in self.by_gpu:
            params.update(self.by_gpu[vendor])
        for model, values in self.by_gpu.items():
            if model not in ("nvidia", "amd") and gpu_name and model.upper() in gpu_name.upper():
                params.update(values)
        return params

    def source_of(self, setting: str) -> str | None:
        return self.sources.get(setting)

    def ours(self) -> list[str]:
        """The settings whose value is hpcai's choice, not the upstream's."""
        return [k for k, v in self.sources.items() if v.startswith("ours")]


@dataclass(frozen=True)
class Option:
    """A workload-specific command-line option, declared here so the launcher
    can offer it without importing the workload. Its value lands in the run
    spec's params under `param` (None: keep the preset's)."""

    flag: str  # "--weights"
    param: str  # "weights"
    help: str
    type: str = "str"  # "str" | "int" | "float" | "flag"
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Impl:
    """One implementation of a workload: which module runs it and how."""

    module: str  # hpcai.workloads.<module> has build(spec, ctx)
    framework: str  # import name the host runtime must have: "torch", "tensorflow", ...
    # "torchrun": one process per GPU, launched by torchrun (DDP, FSDP).
    # "single": one process that drives every GPU itself (MirroredStrategy,
    # an inference server with tensor parallelism, an engine with its own launcher).
    process_model: str = "torchrun"


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    unit: str  # unit of work: "images" or "tokens"
    impls: dict[str, Impl]
    presets: dict[str, Preset] = field(default_factory=dict)
    options: tuple[Option, ...] = ()
    cpu_default_preset: str = "short"
    gpu_default_preset: str = "fast"
    # The Apptainer image family that carries this workload's software stack.
    image_family: str = "cv"
    # Inputs from storage (--data, `hpcai-launch data make`): "jpeg" class folders,
    # "npy" shards of volumes (workloads/datasets.py); None: synthetic inputs only.
    data_format: str | None = None
    # Workload parameters `--vary NAME=...` may sweep besides gpus, batch_size, model
    # and nodes (a problem size: the image size, a cube size).
    vary_params: tuple[str, ...] = ()
    # `--vary model=...`: named sizes, each a set of params (presets are accepted too).
    model_ladder: dict = field(default_factory=dict)

    @property
    def default_impl(self) -> str:
        return next(iter(self.impls))

    def impl(self, name: str | None) -> Impl:
        name = name or self.default_impl
        try:
            return self.impls[name]
        except KeyError:
            raise UsageError(
                f"{self.name} has no implementation {name!r}",
                f"choose one of: {', '.join(self.impls)}",
            ) from None

    def preset(self, name: str) -> Preset:
        try:
            return self.presets[name]
        except KeyError:
            known = ", ".join(self.presets)
            raise UsageError(
                f"unknown preset {name!r} for {self.name}",
                f"choose one of: {known} (see `hpcai-launch list`)",
            ) from None


# ---- the seed paper's settings, with where each comes from ----------------------
# Paths are in RRZE-HPC/hpc-ai-perf-bench (UPSTREAM); the side-by-side reading is in
# the project's notes (upstream-paper-config.md).
_CV_PROTOCOL_SOURCE = ("max_epochs=11, 50 steps per epoch per GPU, the first epoch dropped "
                       "(computer_vision/main_resnet.py:134,196; computer_vision/ldm/callbacks/"
                       "performance_tracking2_rocm.py:729-733)")
_CV_GPUS_SOURCE = ("one GPU per job in every example (computer_vision/README.md:5,7,109-126; "
                   "scripts/slurm/slurm_helma.sh:6-8)")
_CV_PRECISION_SOURCE = ("Lightning's default 32-true, no precision= passed (computer_vision/"
                        "main_resnet.py:189-199), inside NGC pytorch:25.05 (scripts/environment/"
                        "nvidia_cuda12_9_xformers.def:2), which runs matmuls and convolutions in "
                        "TF32: 32-true (fp32 weights; TF32 math on NVIDIA, fp32 on MI300X "
                        "with ROCm 6.3, scripts/environment/amd_rocm6_3_xformers.def:2)")
_NO_COMPILE = "no torch.compile in computer_vision/main_resnet.py, main_vit.py or main_ldm.py"
_CUDNN = ("torch.backends.cudnn.benchmark never set in computer_vision/main_resnet.py, "
          "main_vit.py or main_ldm.py, so False")
_SEARCH = "workloads/batch_search.py"

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

VIT_L16_PAPER = Preset(
    "paper",
    "the seed paper's workload: 224x224, batch 256 per GPU on H100 and 576 on MI300X (the "
    "largest that fits elsewhere), 32-true: fp32 weights, TF32 math on NVIDIA, no compile, "
    "Adam 1e-4, one GPU, 1 warm-up + 10 x 50 steps",
    params={"batch_size": "auto", "batch_search_start": 256, "image_size": 224,
            "num_classes": 1000, "model_size": "full", "precision": "32-true", "compile": False,
            "cudnn_benchmark": False, "optimizer": "adam", "lr": 1e-4},
    protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
    kind="paper",
    by_gpu={"H100": {"batch_size": 256},
            "MI300X": {"batch_size": 576}},
    gpus=1,
    sources={
        "batch_size": ("256 on H100 (computer_vision/README.md:67,109), 576 on MI300X (:122); "
                       f"ours elsewhere (H200 is not stated): the largest that fits ({_SEARCH})"),
        "image_size": "vit_l_16(image_size=224) (computer_vision/vit/model/lit_model.py:14-15; "
                      "main_vit.py:108)",
        "num_classes": "torchvision's default 1000 (computer_vision/vit/model/lit_model.py:14-15)",
        "model_size": "torchvision vit_l_16 (computer_vision/main_vit.py:97)",
        "precision": _CV_PRECISION_SOURCE.replace("main_resnet.py:189-199",
                                                  "main_vit.py:91-92,198"),
        "compile": _NO_COMPILE,
        "cudnn_benchmark": _CUDNN,
        "optimizer": "Adam (computer_vision/vit/model/lit_model.py:40)",
        "lr": "1e-4 (computer_vision/vit/model/lit_model.py:40)",
        "protocol": _CV_PROTOCOL_SOURCE.replace("main_resnet.py:134,196", "main_vit.py:136,198"),
        "gpus": _CV_GPUS_SOURCE,
    },
)

SD2_PAPER = Preset(
    "paper",
    "the seed paper's workload: 512x512, fp16-mixed, the same UNet/VAE/OpenCLIP text encoder "
    "every step, AdamW 1e-4, one GPU, 1 warm-up + 10 x 50 steps; batch: the largest that fits "
    "(the upstream README's 192/224 cannot fit at 512x512)",
    params={"batch_size": "auto", "batch_search_start": 8, "image_size": 512,
            "model_size": "full", "precision": "fp16-mixed", "compile": False,
            "cudnn_benchmark": False},
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
        "cudnn_benchmark": _CUDNN,
        "protocol": _CV_PROTOCOL_SOURCE.replace("main_resnet.py:134,196", "main_ldm.py:159,199"),
        "gpus": _CV_GPUS_SOURCE,
    },
    known_differences=(
        "attention: the upstream uses xformers memory_efficient_attention (ldm/modules/"
        "attention.py:13-17); hpcai's images carry no xformers and use PyTorch's SDPA",),
)

LLAMA3_8B_PRETRAIN_PAPER = Preset(
    "paper",
    "the seed paper's workload (LitGPT): Llama-3-8B, 512-token sequences, micro-batch 4, global "
    "batch 64 (gradient accumulation), bf16-true, FSDP full shard, torch.compile, one node of "
    "4 GPUs; 1 warm-up + 10 x 20 optimizer steps",
    params={"model": "Llama-3-8B", "batch_size": 4, "global_batch_size": 64, "seq_len": 512,
            "precision": "bf16-true", "sharding": "FULL_SHARD", "compile": True,
            "data": "synthetic", "data_workers": 4, "lr": 2e-4, "min_lr": 6e-5},
    protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 20},
    kind="paper",
    gpus=4,
    sources={
        "model": "litgpt pretrain Meta-Llama-3-8B (llm/training/slurm_scripts/"
                 "powercap_training_4x.sh:153-156)",
        "batch_size": "micro_batch_size 4 (llm/training/configs/llama3_8b_4gpu.yaml:38)",
        "global_batch_size": "global_batch_size 64, i.e. 4 accumulation steps on 4 GPUs "
                             "(llm/training/configs/llama3_8b_4gpu.yaml:37; litgpt/args.py:53-63)",
        "seq_len": "max_seq_length 512 (llm/training/configs/llama3_8b_4gpu.yaml:43)",
        "precision": "bf16-true (llm/training/configs/llama3_8b_4gpu.yaml:14)",
        "sharding": "FSDPStrategy(sharding_strategy=\"FULL_SHARD\") (llm/training/litgpt/"
                    "litgpt/pretrain.py:134)",
        "compile": "torch.compile always (llm/training/litgpt/litgpt/pretrain.py:208)",
        "data": "litgpt.data.Synthetic, random token ids (llm/training/configs/"
                "llama3_8b_4gpu.yaml:22-24)",
        "data_workers": "num_workers 4 (llm/training/configs/llama3_8b_4gpu.yaml:22-24)",
        "lr": "AdamW lr 2e-4, wd 0.1, betas (0.9, 0.95) (llm/training/configs/"
              "llama3_8b_4gpu.yaml:76-82)",
        "min_lr": "6e-5 (llm/training/configs/llama3_8b_4gpu.yaml:49)",
        "protocol": ("ours: the upstream trains 30M tokens and its analysis script (the window "
                     "it averages) is not in the repository (llm/README.md:26); 1 warm-up + "
                     "10 measured epochs of 20 optimizer steps"),
        "gpus": "one node of 4 GPUs (llm/training/slurm_scripts/powercap_training_4x.sh)",
    },
    known_differences=(
        "initialisation: random weights unless --weights (the upstream starts from Meta's)",
        "LitGPT 0.5.13 and Lightning 2.6 (the upstream vendors LitGPT 0.5.8.dev1)"),
)

LLAMA3_8B_INFERENCE_PAPER = Preset(
    "paper",
    "the seed paper's workload (SGLang): one server with --tp 4 over a node of 4 GPUs, 2048 "
    "random prompts, inputs uniform up to 1024 tokens, outputs up to 256, all sent at once",
    params={"model": "Llama-3-8B", "batch_size": "unlimited", "tp": 4, "dp": 1,
            "input_len": 1024, "output_len": 256, "length_range_ratio": 0.0,
            "request_rate": "inf", "warmup_requests": 100,
            "server_timeout_s": 1200, "server_stop_grace_s": 20},
    protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 2048},
    kind="paper",
    gpus=4,
    sources={
        "model": "Meta-Llama-3-8B (llm/inference/slurm_scripts/powercap_inference.sh:35,119)",
        "tp": "--tp 4 (llm/inference/slurm_scripts/powercap_inference.sh:118-123)",
        "dp": "one server, no --dp (llm/inference/slurm_scripts/powercap_inference.sh:118-123)",
        "batch_size": "no --max-concurrency: every request in flight at once "
                      "(llm/inference/slurm_scripts/powercap_inference.sh:200-210)",
        "input_len": ("--random-input-len 1024 (llm/inference/slurm_scripts/powercap_inference.sh"
                      ":207; 8192 before 52d1f50 and still in powercap_inference_mi300x_4x.sh:206)"),
        "output_len": "--random-output-len 256 (llm/inference/slurm_scripts/"
                      "powercap_inference.sh:208)",
        "length_range_ratio": ("--random-range-ratio not given, so bench_serving's default 0.0: "
                               "lengths uniform from 0 up to the maximum (llm/inference/sglang/"
                               "bench_serving.py:684-693,1441-1443)"),
        "request_rate": "default inf (llm/inference/sglang/bench_serving.py:1447-1458)",
        "warmup_requests": ("100 prompts once per job (llm/inference/slurm_scripts/"
                            "powercap_inference.sh:140-161)"),
        "protocol": "--num-prompts 2048 (llm/inference/slurm_scripts/powercap_inference.sh:40,206)",
        "gpus": "one node of 4 GPUs (llm/inference/slurm_scripts/powercap_inference.sh:39)",
    },
    known_differences=(
        "SGLang 0.5.19 (the upstream runs 0.4.4.post1: llm/inference/README.md:34)",
        "weights: dummy random weights unless --weights (the upstream serves Meta's)",
        "prompts: SGLang's random-ids dataset (the upstream patched its `random` to random ids "
        "in 52d1f50)"),
)

_FAST_SOURCE = "ours: hpcai's best honest configuration (README, Presets)"

RESNET50 = Workload(
    name="resnet50",
    summary="ResNet-50 training (torchvision), synthetic 224x224 images on the device, SGD",
    unit="images",
    impls={"pytorch": Impl("resnet50", "torch"),
           # One process; tf.distribute.MirroredStrategy drives every GPU of the node.
           "tensorflow": Impl("resnet50_tf", "tensorflow", process_model="single")},
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
            protocol={"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 3},
        ),
        "tiny": Preset(
            "tiny",
            "64x64 images, batch 4, a few steps: seconds on CPU, for tests",
            params={"batch_size": 4, "image_size": 64, "num_classes": 100},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2},
        ),
    },
    data_format="jpeg",
    vary_params=("image_size",),
)

VIT_L16 = Workload(
    name="vit-l16",
    summary="ViT-L/16 training (torchvision), synthetic 224x224 images on the device, AdamW",
    unit="images",
    impls={"pytorch": Impl("vit_l16", "torch")},
    presets={
        "paper": VIT_L16_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best: bf16-mixed, torch.compile, fused AdamW, SDPA attention, the largest "
            "batch that fits, every GPU; the paper's 224x224 and 1 warm-up + 10 x 50 steps",
            params={"batch_size": "auto", "batch_search_start": 64, "image_size": 224,
                    "num_classes": 1000, "model_size": "full", "precision": "auto",
                    "compile": True, "cudnn_benchmark": True, "fused_optimizer": True},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "short": Preset(
            "short",
            "the full model at 224x224, batch 2, few steps: minutes on a 2-core CPU",
            params={"batch_size": 2, "image_size": 224, "num_classes": 1000, "model_size": "full"},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2},
        ),
        "tiny": Preset(
            "tiny",
            "a shrunk ViT (2 layers, width 64) on 64x64 images, batch 4: seconds on CPU, for tests",
            params={"batch_size": 4, "image_size": 64, "num_classes": 100, "model_size": "tiny"},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2},
        ),
    },
    cpu_default_preset="tiny",
    data_format="jpeg",
    vary_params=("image_size",),
)

SD2 = Workload(
    name="sd2",
    summary="Stable Diffusion v2 training (diffusers): VAE and OpenCLIP text encoder frozen, "
            "UNet trained (v-prediction, AdamW), synthetic 512x512 images and prompts",
    unit="images",
    impls={"pytorch": Impl("sd2", "torch")},
    presets={
        "paper": SD2_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best: bf16-mixed, torch.compile, fused AdamW, SDPA attention, the largest "
            "batch that fits, every GPU; the paper's 512x512 and 1 warm-up + 10 x 50 steps",
            params={"batch_size": "auto", "batch_search_start": 8, "image_size": 512,
                    "model_size": "full", "precision": "auto", "compile": True,
                    "cudnn_benchmark": True, "fused_optimizer": True},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "tiny": Preset(
            "tiny",
            "shrunk UNet, VAE and text encoder on 64x64 images, batch 2: seconds on CPU, for tests",
            params={"batch_size": 2, "image_size": 64, "model_size": "tiny"},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2},
        ),
    },
    options=(
        Option("--weights", "weights",
               "a local diffusers-format folder (unet/, vae/, text_encoder/) to load real "
               "weights from; default: random weights, nothing downloaded"),
    ),
    cpu_default_preset="tiny",
)

# A Llama-3-8B shrunk to what a CPU trains in seconds (tiny) or a minute (short).
_TINY_LLAMA = {"name": "tiny-llama-2l", "n_layer": 2, "n_embd": 128, "n_head": 4,
               "n_query_groups": 2, "intermediate_size": 344, "vocab_size": 512,
               "padded_vocab_size": 512, "block_size": 64}
_SMALL_LLAMA = {"name": "small-llama-4l", "n_layer": 4, "n_embd": 256, "n_head": 4,
                "n_query_groups": 2, "intermediate_size": 688, "vocab_size": 4096,
                "padded_vocab_size": 4096, "block_size": 256}

LLAMA3_8B_PRETRAIN = Workload(
    name="llama3-8b-pretrain",
    summary="Llama-3-8B pretraining with LitGPT (FSDP over the node's GPUs), random init, tokens/s",
    unit="tokens",
    # One process per GPU under torchrun; Fabric joins torchrun's process group
    # and shards with FSDP across all of them (see workloads/llm_pretrain.py).
    # The result's software section names LitGPT, with PyTorch's CUDA/ROCm build
    # and every library's version beside it.
    impls={"litgpt": Impl("llm_pretrain", "litgpt", process_model="torchrun")},
    image_family="llm-train",
    presets={
        "paper": LLAMA3_8B_PRETRAIN_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best: Llama-3-8B, bf16-true, FSDP, torch.compile, fused AdamW, 2048-token "
            "sequences, micro-batch 1, one optimizer step per micro-batch, every GPU",
            params={"model": "Llama-3-8B", "batch_size": 1, "seq_len": 2048,
                    "precision": "bf16-true", "compile": True, "data": "synthetic",
                    "data_workers": 2},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 20},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "1b": Preset(
            "1b",
            "Llama-3.2-1B (fits one GPU), 2048-token sequences, micro-batch 4 per GPU",
            params={"model": "Llama-3.2-1B", "batch_size": 4, "seq_len": 2048,
                    "data": "synthetic", "data_workers": 2},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 20},
        ),
        "short": Preset(
            "short",
            "a 4-layer Llama-style model, 256-token sequences: about a minute on a 2-core CPU",
            params={"model": "Llama-3-8B", "model_overrides": _SMALL_LLAMA, "batch_size": 2,
                    "seq_len": 256, "data": "synthetic", "data_workers": 0},
            protocol={"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 5},
        ),
        "tiny": Preset(
            "tiny",
            "a 2-layer Llama-style model, 64-token sequences: seconds on CPU, for tests",
            params={"model": "Llama-3-8B", "model_overrides": _TINY_LLAMA, "batch_size": 2,
                    "seq_len": 64, "data": "synthetic", "data_workers": 0},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 3},
        ),
    },
    options=(
        Option("--weights", "weights", "LitGPT checkpoint folder to start from (default: random "
               "init); a relative name is looked up in $HPCAI_MODELS_DIR"),
        Option("--data", "data", "'synthetic' (random token ids) or a folder of .txt files "
               "(a relative name is looked up in $HPCAI_DATA_DIR)"),
        Option("--tokenizer", "tokenizer", "tokenizer folder for text data (default: --weights)"),
        Option("--seq-len", "seq_len", "tokens per sequence", type="int"),
        Option("--global-batch-size", "global_batch_size",
               "sequences per optimizer step over all GPUs; above --batch-size x GPUs, "
               "gradients accumulate (default: --batch-size x GPUs)", type="int"),
    ),
)

LLAMA3_8B_INFERENCE = Workload(
    name="llama3-8b-inference",
    summary="Llama-3-8B served by SGLang (random weights by default), load from SGLang's "
            "benchmark client, output tokens/s; a step is one request, the batch size is "
            "the requests in flight",
    unit="tokens",
    # One process: the entrypoint starts the SGLang server, which drives every GPU.
    impls={"sglang": Impl("llm_serve", "sglang", process_model="single")},
    image_family="llm-serve",
    presets={
        "paper": LLAMA3_8B_INFERENCE_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's serving check: Llama-3-8B, dummy weights, one replica per GPU (--dp), "
            "1024 tokens in, 1024 out, 64 requests in flight, 640 requests measured",
            params={"model": "Llama-3-8B", "batch_size": 64, "input_len": 1024,
                    "output_len": 1024, "server_timeout_s": 1200, "server_stop_grace_s": 20},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 640},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "short": Preset(
            "short",
            "Llama-3-8B, dummy weights, 256 in, 256 out, 32 in flight, 128 requests: a quick GPU check",
            params={"model": "Llama-3-8B", "batch_size": 32, "input_len": 256,
                    "output_len": 256, "server_timeout_s": 1200, "server_stop_grace_s": 20},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 128},
        ),
        "tiny": Preset(
            "tiny",
            "a 2-layer Llama-style model, 16 in, 8 out, 4 in flight, 8 requests: for tests",
            params={"model": "tiny-llama-2l", "batch_size": 4, "input_len": 16,
                    "output_len": 8, "server_timeout_s": 120, "server_stop_grace_s": 3},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 8},
        ),
    },
    options=(
        Option("--weights", "weights", "Hugging Face model folder to serve (default: random "
               "weights, no download); a relative name is looked up in $HPCAI_MODELS_DIR"),
        Option("--tp", "tp", "tensor-parallel size (default: 1)", type="int"),
        Option("--dp", "dp", "data-parallel size (default: the GPUs / --tp)", type="int"),
        Option("--request-rate", "request_rate",
               "requests per second, Poisson arrivals (default: all at once, at most "
               "--batch-size in flight)", type="float"),
        Option("--input-len", "input_len", "prompt tokens per request (the maximum when "
               "--length-range-ratio is below 1)", type="int"),
        Option("--output-len", "output_len", "generated tokens per request (the maximum when "
               "--length-range-ratio is below 1)", type="int"),
        Option("--length-range-ratio", "length_range_ratio",
               "request lengths uniform from this fraction of --input-len/--output-len up to "
               "them (SGLang's --random-range-ratio; 1: fixed lengths, 0: the paper's mix)",
               type="float"),
        Option("--server-timeout", "server_timeout_s",
               "seconds to wait for the server to be ready", type="float"),
        Option("--server-args", "server_args",
               "more arguments for sglang.launch_server, e.g. '--mem-fraction-static 0.85'"),
    ),
    cpu_default_preset="tiny",
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (RESNET50, VIT_L16, SD2,
                                                      LLAMA3_8B_PRETRAIN, LLAMA3_8B_INFERENCE)}


def batch_search_start(spec: dict) -> int:
    """Where `--batch-size auto` starts: the preset's search start, else its batch."""
    params = spec["params"]
    start = params.get("batch_search_start")
    if start is None:
        start = get_workload(spec["workload"]).preset(spec["preset"]).params.get("batch_size")
    return int(start) if isinstance(start, int) or str(start).isdigit() else 8


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        known = ", ".join(sorted(WORKLOADS))
        raise UsageError(
            f"unknown workload {name!r}", f"choose one of: {known} (see `hpcai-launch list`)"
        ) from None


IMAGE_FAMILIES = ("cv", "llm-train", "llm-serve")


def family_workloads(family: str) -> list[str]:
    """The workloads an image family carries, in catalog order."""
    return [w.name for w in WORKLOADS.values() if w.image_family == family]
