"""Llama-3-8B pretraining with LitGPT (workloads/llm_pretrain.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcai.workloads.declaration import CPU_SHORT_WINDOWS, CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.params import WorkloadParams, param
from hpcai.workloads.registry._seed_paper import _FAST_SOURCE

@dataclass(frozen=True)
class LlmPretrainParams(WorkloadParams):
    model: str = "Llama-3-8B"  # a LitGPT config name
    model_overrides: dict | None = None  # LitGPT Config fields over the named model's
    weights: str | None = param(flag="--weights", help="LitGPT checkpoint folder to start from (default: "
                                "random init); a relative name is looked up in $HPCAI_MODELS_DIR")
    data: str = param("synthetic", flag="--data", help="'synthetic' (random token ids) or a folder of "
                      ".txt files (a relative name is looked up in $HPCAI_DATA_DIR)")
    tokenizer: str | None = param(flag="--tokenizer", help="tokenizer folder for text data (default: --weights)")
    seq_len: int | None = param(flag="--seq-len", type="int", help="tokens per sequence")
    global_batch_size: int | None = param(
        flag="--global-batch-size", type="int",
        help="sequences per optimizer step over all GPUs; above --batch-size x GPUs, gradients "
             "accumulate (default: --batch-size x GPUs)")
    data_workers: int = 2
    sharding: str = "HYBRID_SHARD"  # FSDP's strategy
    precision: str = "auto"
    compile: Any = None  # None or "auto": on CUDA only
    lr: float | None = None  # None: LitGPT's
    min_lr: float = 4e-5


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


_TINY_LLAMA = {"name": "tiny-llama-2l", "n_layer": 2, "n_embd": 128, "n_head": 4,
               "n_query_groups": 2, "intermediate_size": 344, "vocab_size": 512,
               "padded_vocab_size": 512, "block_size": 64}
_SMALL_LLAMA = {"name": "small-llama-4l", "n_layer": 4, "n_embd": 256, "n_head": 4,
                "n_query_groups": 2, "intermediate_size": 688, "vocab_size": 4096,
                "padded_vocab_size": 4096, "block_size": 256}


WORKLOAD = Workload(
    name="llama3-8b-pretrain",
    summary="Llama-3-8B pretraining with LitGPT (FSDP over the node's GPUs), random init, tokens/s",
    unit="tokens",
    # One process per GPU under torchrun; Fabric joins torchrun's process group
    # and shards with FSDP across all of them (see workloads/llm_pretrain.py).
    # The result's software section names LitGPT, with PyTorch's CUDA/ROCm build
    # and every library's version beside it.
    impls={"litgpt": Impl("llm_pretrain", "litgpt", process_model="torchrun",
                            honours=("precision", "compile"),
                            libraries=("lightning", "litdata", "tokenizers"), in_run="epochs")},
    params=LlmPretrainParams,
    image_family="llm-train",
    order=50,
    presets={
        "paper": LLAMA3_8B_PRETRAIN_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's best at bf16: Llama-3-8B, bf16-true, FSDP (full shard within the node, "
            "replicated across nodes), torch.compile, 2048-token sequences, micro-batch 2, "
            "gradients accumulated to a global batch of 64 sequences (131,072 tokens per optimizer "
            "step), every GPU. FP8 is off: the images carry no Transformer Engine. Expected about "
            "1.0-1.3x the paper per GPU (fewer optimizer steps, clips and reduce-scatters per "
            "token than micro-batch 1 without accumulation), not 2x: the paper already runs near "
            "a third of the bf16 peak; the best published H100 figures use FP8 (unmeasured on a GPU)",
            params={"model": "Llama-3-8B", "batch_size": 2, "global_batch_size": 64, "seq_len": 2048,
                    "precision": "bf16-true", "compile": True, "data": "synthetic",
                    "data_workers": 2},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 20},
            kind="fast", sources={"all": _FAST_SOURCE, "global_batch_size": (
                "ours: 64 sequences as the paper's global batch, so an optimizer step (and its "
                "gradient clip and reduce-scatter) comes every 64 x 2048 tokens, not every 2048 per GPU; "
                "a multiple of micro-batch x GPUs on 1, 2, 4, 8, 16 and 32 GPUs")},
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
            protocol={"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 5}, windows=CPU_SHORT_WINDOWS),
        "tiny": Preset(
            "tiny",
            "a 2-layer Llama-style model, 64-token sequences: seconds on CPU, for tests",
            params={"model": "Llama-3-8B", "model_overrides": _TINY_LLAMA, "batch_size": 2,
                    "seq_len": 64, "data": "synthetic", "data_workers": 0},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 3}, windows=CPU_TINY_WINDOWS),
    },
)
