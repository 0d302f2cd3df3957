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


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    params: dict  # workload parameters (batch_size, image_size, ...)
    protocol: dict  # warmup_epochs, epochs, steps_per_epoch


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
    gpu_default_preset: str = "paper"
    # The Apptainer image family that carries this workload's software stack.
    image_family: str = "cv"

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


RESNET50 = Workload(
    name="resnet50",
    summary="ResNet-50 training (torchvision), synthetic 224x224 images on the device, SGD",
    unit="images",
    impls={"pytorch": Impl("resnet50", "torch"),
           # One process; tf.distribute.MirroredStrategy drives every GPU of the node.
           "tensorflow": Impl("resnet50_tf", "tensorflow", process_model="single")},
    presets={
        "paper": Preset(
            "paper",
            "the seed paper's protocol: 224x224, batch 256 per GPU, 1 warm-up + 10 measured epochs",
            params={"batch_size": 256, "image_size": 224, "num_classes": 1000},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
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
)

VIT_L16 = Workload(
    name="vit-l16",
    summary="ViT-L/16 training (torchvision), synthetic 224x224 images on the device, AdamW",
    unit="images",
    impls={"pytorch": Impl("vit_l16", "torch")},
    presets={
        "paper": Preset(
            "paper",
            "the seed paper's input size: 224x224, batch 64 per GPU, 1 warm-up + 10 measured epochs",
            params={"batch_size": 64, "image_size": 224, "num_classes": 1000, "model_size": "full"},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
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
)

SD2 = Workload(
    name="sd2",
    summary="Stable Diffusion v2 training (diffusers): VAE and OpenCLIP text encoder frozen, "
            "UNet trained (v-prediction, AdamW), synthetic 512x512 images and prompts",
    unit="images",
    impls={"pytorch": Impl("sd2", "torch")},
    presets={
        "paper": Preset(
            "paper",
            "the seed paper's input size: 512x512, real model sizes, batch 8 per GPU, "
            "1 warm-up + 10 measured epochs",
            params={"batch_size": 8, "image_size": 512, "model_size": "full"},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
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
        "paper": Preset(
            "paper",
            "Llama-3-8B, bf16, 2048-token sequences, micro-batch 1 per GPU, synthetic tokens",
            params={"model": "Llama-3-8B", "batch_size": 1, "seq_len": 2048,
                    "data": "synthetic", "data_workers": 2},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 20},
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
        "paper": Preset(
            "paper",
            "Llama-3-8B, dummy weights, 1024 tokens in, 1024 out, 64 requests in flight, "
            "640 requests measured",
            params={"model": "Llama-3-8B", "batch_size": 64, "input_len": 1024,
                    "output_len": 1024, "server_timeout_s": 1200, "server_stop_grace_s": 20},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 640},
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
        Option("--input-len", "input_len", "prompt tokens per request", type="int"),
        Option("--output-len", "output_len", "generated tokens per request", type="int"),
        Option("--server-timeout", "server_timeout_s",
               "seconds to wait for the server to be ready", type="float"),
        Option("--server-args", "server_args",
               "more arguments for sglang.launch_server, e.g. '--mem-fraction-static 0.85'"),
    ),
    cpu_default_preset="tiny",
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (RESNET50, VIT_L16, SD2,
                                                      LLAMA3_8B_PRETRAIN, LLAMA3_8B_INFERENCE)}


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
