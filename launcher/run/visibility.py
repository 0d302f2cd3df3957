"""Which GPUs this job may use, and how to name them to the workload.

The management library's index is not the workload's device number: under a
Slurm job with cgroup device constraint CUDA renumbers the job's GPUs from 0
while NVML keeps the node's indices, and CUDA_VISIBLE_DEVICES may hold
ordinals, UUIDs (or unique prefixes of them), MIG identifiers, or Slurm's
"NoDevFiles". So the launcher resolves what it inherited to GPUs, identifies
each by UUID, and hands the workload UUIDs in the order it chose
(CUDA_VISIBLE_DEVICES, or ROCR_VISIBLE_DEVICES on AMD, whose HIP also obeys
HIP_/CUDA_VISIBLE_DEVICES: those are cleared so nothing masks twice).
"""
from __future__ import annotations

import os

AMD_MASKS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _entries(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _workload_id(gpu) -> str:
    """The id the workload's runtime accepts for this GPU."""
    if gpu.vendor == "nvidia" and gpu.mig_enabled and gpu.mig_uuids:
        return gpu.mig_uuids[0]  # CUDA sees a MIG-mode GPU only through its MIG devices
    if gpu.vendor == "nvidia":
        return gpu.visible_id or gpu.uuid
    return gpu.visible_id or str(gpu.index)  # ROCm before 6.4: no ROCr UUID to give


def _resolve(entry: str, gpus: list, by_uuid) -> tuple[object, str] | None:
    """One entry of a *_VISIBLE_DEVICES list: an ordinal into gpus, a MIG
    device, or a (prefix of a) UUID; None when it names nothing."""
    if entry.lstrip("-").isdigit():
        k = int(entry)
        return (gpus[k], _workload_id(gpus[k])) if 0 <= k < len(gpus) else None
    if entry.startswith("MIG-"):
        for g in gpus:
            if entry in g.mig_uuids:
                return g, entry
        return None
    wanted = entry.lower() if entry.lower().startswith("gpu-") else f"gpu-{entry.lower()}"
    matches = [g for g in gpus if by_uuid(g).lower().startswith(wanted)]
    return (matches[0], _workload_id(matches[0])) if len(matches) == 1 else None


def _filter(value: str | None, gpus: list, by_uuid) -> list[tuple[object, str]]:
    """Like the CUDA runtime: the list stops at the first entry naming nothing
    (or naming a GPU twice)."""
    if value is None:
        return [(g, _workload_id(g)) for g in gpus]
    chosen: list[tuple[object, str]] = []
    for entry in _entries(value):
        found = _resolve(entry, gpus, by_uuid)
        if found is None or any(g is found[0] for g, _ in chosen):
            break
        chosen.append(found)
    return chosen


def visible_gpus(gpus: list, env=None) -> list[tuple[object, str]]:
    """(GpuInfo, workload id) for each GPU this job may use, in the order its
    inherited *_VISIBLE_DEVICES gives (the library's order when unset).
    `gpus`: what the management library could open, in its index order."""
    env = os.environ if env is None else env
    if not gpus:
        return []
    if gpus[0].vendor != "amd":
        return _filter(env.get("CUDA_VISIBLE_DEVICES"), gpus, lambda g: g.uuid)
    # ROCr first (indices or its "GPU-<hex>" UUIDs), then HIP's and CUDA's
    # indices relative to what ROCr left (ROCm environment-variable docs).
    chosen = _filter(env.get("ROCR_VISIBLE_DEVICES"), gpus, lambda g: g.visible_id or g.uuid)
    for name in AMD_MASKS[1:]:
        value = env.get(name)
        if value is not None:
            subset = [g for g, _ in chosen]
            chosen = [(g, i) for g, i in _filter(value, subset, lambda g: g.visible_id or g.uuid)]
    return chosen


def workload_environment(env: dict, vendor: str | None, ids: list[str]) -> None:
    """Name the chosen GPUs to the workload, in the launcher's order."""
    if vendor == "amd":
        for name in AMD_MASKS:
            env.pop(name, None)
        env["ROCR_VISIBLE_DEVICES"] = ",".join(ids)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
