"""The seed paper's accounting of power, energy and efficiency, computed from
hpcai's own samples beside hpcai's figures, so a `paper`-preset result can be
set beside the paper like for like.

Upstream: RRZE-HPC/hpc-ai-perf-bench at 52d1f50255e43e7f7d6c7577d1a0efa42009647b.

Vision workloads (ResNet-50, ViT-L/16, SD2), the callback
computer_vision/ldm/callbacks/performance_tracking2_rocm.py (used by
main_resnet.py:15,150, main_vit.py:15,152, main_ldm.py:11,175):
- power is read every 0.1 s (:45, main_resnet.py:152) with
  nvmlDeviceGetPowerUsage (:391), the 1-s averaged power on Hopper; the GPUs'
  sum divided by their number is one sample (:476-492);
- samples are taken during every epoch, the first (warm-up) one included
  (:512-518 start, :638-645 stop), and the mean power is the plain mean of
  all of them (:773);
- throughput is the mean of the per-epoch rates with the first epoch dropped
  (:729-732); the code has no energy integral: efficiency is throughput over
  mean power.

LLM workloads (Llama-3-8B pretraining and SGLang serving): nvidia-smi
`power.draw` every 100 ms over the whole job step
(llm/training/slurm_scripts/powercap_training_4x.sh:138-139,
llm/inference/slurm_scripts/powercap_inference.sh:185-187); the analysis
scripts that reduce it are not in the repository (llm/README.md:26,33 name
them), so "the paper's" figure here is the mean over every sample of the
process, as that log holds it.

hpcai's own figures stay the headline: energy from the counter over the
measured window only (workloads/result.py). This block is the second,
labelled figure.
"""
from __future__ import annotations

import statistics

UPSTREAM = "RRZE-HPC/hpc-ai-perf-bench@52d1f50"
CV_CALLBACK = "computer_vision/ldm/callbacks/performance_tracking2_rocm.py"
VISION = {"resnet50", "vit_l16", "sd2"}
LLM = {"llama3_8b_pretrain", "llama3_8b_inference"}
# NVML's GetPowerUsage on Hopper and later: the average over the last second.
AVERAGE_S = 1.0


def method_for(workload: str) -> str | None:
    base = workload.replace("-", "_")
    if any(base.startswith(w) for w in VISION):
        return "vision-callback"
    if any(base.startswith(w) for w in LLM):
        return "nvidia-smi-whole-process"
    return None


def node_power_ticks(sampler, sources: list[int]) -> tuple[list[float], list[float], set]:
    """Ticks where every source read power: their times, the sources' summed
    power (W) and the power kinds read ("instant", "average")."""
    times, powers, kinds = [], [], set()
    for t, row in zip(sampler.times, sampler.readings):
        got = [row[i] for i in sources]
        if got and all(r is not None and r.power_w is not None for r in got):
            times.append(t)
            powers.append(sum(r.power_w for r in got))
            kinds.update(r.power_source for r in got if r.power_source)
    return times, powers, kinds


def trailing_average(times: list[float], powers: list[float], span_s: float = AVERAGE_S) -> list[float]:
    """Each sample replaced by the mean of the samples in the span_s before it
    (itself included): what a 1-s averaged power reading would have said."""
    out, lo, total = [], 0, 0.0
    for hi, (t, p) in enumerate(zip(times, powers)):
        total += p
        while times[lo] <= t - span_s:
            total -= powers[lo]
            lo += 1
        out.append(total / (hi - lo + 1))
    return out


def account(method: str, sampler, sources: list[int], epochs: list[dict],
            per_epoch_node: list[float], window_s: float | None, gpus: int,
            overhead_w: float) -> dict | None:
    """The paper's mean power, energy over our measured window and efficiency."""
    if sampler is None or not sources or not gpus:
        return None
    times, powers, kinds = node_power_ticks(sampler, sources)
    if not times:
        return None
    emulated = "average" not in kinds  # we read instant power: average it as NVML would
    if emulated:
        powers = trailing_average(times, powers)
    if method == "vision-callback":
        spans = [(e["start"], e["end"]) for e in epochs]  # warm-up epochs included
        picked = [p for t, p in zip(times, powers) if any(a <= t <= b for a, b in spans)]
        span_text = "every epoch, the warm-up epoch included"
        cite = f"{UPSTREAM} {CV_CALLBACK}:476-492,512-518,638-645,729-732,773"
    else:
        picked = powers
        span_text = "the whole process (every sample hpcai took)"
        cite = (f"{UPSTREAM} llm/training/slurm_scripts/powercap_training_4x.sh:138-139, "
                "llm/inference/slurm_scripts/powercap_inference.sh:185-187")
    if not picked or not per_epoch_node:
        return None
    power_per_gpu = statistics.fmean(picked) / len(sources)
    throughput = statistics.fmean(per_epoch_node)
    node_power = power_per_gpu * gpus
    return {
        "method": method,
        "upstream": cite,
        "power_reading": ("1-s trailing average of hpcai's instant samples (NVML GetPowerUsage on "
                          "Hopper)" if emulated else "the averaged power hpcai read"),
        "power_span": span_text,
        "power_samples": len(picked),
        "mean_power_w_per_gpu": power_per_gpu,
        "throughput_node": throughput,
        "throughput_per_gpu": throughput / gpus,
        "throughput_basis": "mean of the measured epochs' rates (the first epoch dropped)",
        "energy_j": node_power * window_s if window_s else None,
        "units_per_joule": throughput / node_power if node_power else None,
        "units_per_joule_with_overhead": (throughput / (node_power + overhead_w)
                                          if node_power + overhead_w else None),
    }
