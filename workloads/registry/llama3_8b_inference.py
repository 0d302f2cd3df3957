"""Llama-3-8B served by SGLang (workloads/llm_serve.py)."""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.workloads.declaration import CPU_SHORT_WINDOWS, CPU_TINY_WINDOWS, Impl, Preset, Workload
from hpcai.workloads.params import WorkloadParams, param
from hpcai.workloads.registry._seed_paper import _FAST_SOURCE

@dataclass(frozen=True)
class LlmServeParams(WorkloadParams):
    model: str = "Llama-3-8B"  # the model's architecture (random weights unless --weights)
    weights: str | None = param(flag="--weights", help="Hugging Face model folder to serve (default: "
                                "random weights, no download); a relative name is looked up in "
                                "$HPCAI_MODELS_DIR")
    tp: int | None = param(flag="--tp", type="int", help="tensor-parallel size (default: 1)")
    dp: int | None = param(flag="--dp", type="int", help="data-parallel size (default: the GPUs / --tp)")
    request_rate: float | str | None = param(
        flag="--request-rate", type="float",
        help="requests per second, Poisson arrivals (default: all at once, at most --batch-size in flight)")
    input_len: int | None = param(flag="--input-len", type="int", help="prompt tokens per request (the "
                                  "maximum when --length-range-ratio is below 1)")
    output_len: int | None = param(flag="--output-len", type="int", help="generated tokens per request "
                                   "(the maximum when --length-range-ratio is below 1)")
    length_range_ratio: float = param(
        1.0, flag="--length-range-ratio", type="float",
        help="request lengths uniform from this fraction of --input-len/--output-len up to them "
             "(SGLang's --random-range-ratio; 1: fixed lengths, 0: the paper's mix)")
    server_timeout_s: float = param(1200.0, flag="--server-timeout", type="float",
                                    help="seconds to wait for the server to be ready")
    server_args: str | None = param(flag="--server-args", help="more arguments for sglang.launch_server, "
                                    "e.g. '--mem-fraction-static 0.85'")
    concurrency_ramp: str | None = param(
        flag="--concurrency-ramp",
        help="requests in flight to probe before the measured load, e.g. 64,128,256 (one short "
             "wave each); the load runs at the smallest within 3% of the best output tokens/s. "
             "'off': none. Skipped when --batch-size or --request-rate is given")
    warmup_requests: int | None = None  # None: the concurrency, else 64
    server_stop_grace_s: float = 20.0
    port: int | None = None  # None: a free one


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


WORKLOAD = Workload(
    name="llama3-8b-inference",
    summary="Llama-3-8B served by SGLang (random weights by default), load from SGLang's "
            "benchmark client, output tokens/s; a step is one request, the batch size is "
            "the requests in flight",
    unit="tokens",
    # One process: the entrypoint starts the SGLang server, which drives every GPU.
    impls={"sglang": Impl("llm_serve", "sglang", process_model="single",
                            libraries=("tokenizers",), in_run="waves")},
    params=LlmServeParams,
    image_family="llm-serve",
    order=60,
    presets={
        "paper": LLAMA3_8B_INFERENCE_PAPER,
        "fast": Preset(
            "fast",
            "hpcai's serving check: Llama-3-8B, dummy weights, one replica per GPU (--dp), "
            "1024 tokens in, 1024 out; the requests in flight measured, not fixed: a short wave "
            "at each of 64, 128 and 256, the smallest within 3% of the best output tokens/s kept "
            "(--batch-size N skips the ramp and keeps N), 640 requests measured",
            params={"model": "Llama-3-8B", "batch_size": 64, "concurrency_ramp": "64,128,256",
                    "input_len": 1024,
                    "output_len": 1024, "server_timeout_s": 1200, "server_stop_grace_s": 20},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 640},
            kind="fast", sources={"all": _FAST_SOURCE},
        ),
        "short": Preset(
            "short",
            "Llama-3-8B, dummy weights, 256 in, 256 out, 32 in flight, 128 requests: a quick GPU check",
            params={"model": "Llama-3-8B", "batch_size": 32, "input_len": 256,
                    "output_len": 256, "server_timeout_s": 1200, "server_stop_grace_s": 20},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 128}, windows=CPU_SHORT_WINDOWS),
        "tiny": Preset(
            "tiny",
            "a 2-layer Llama-style model, 16 in, 8 out, 4 in flight, 8 requests: for tests",
            params={"model": "tiny-llama-2l", "batch_size": 4, "input_len": 16,
                    "output_len": 8, "server_timeout_s": 120, "server_stop_grace_s": 3},
            protocol={"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 8}, windows=CPU_TINY_WINDOWS),
    },
    cpu_default_preset="tiny",
)
