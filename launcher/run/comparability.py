"""Whether a run is comparable with the seed paper's published tables.

Only a `paper` preset run as the preset says is: any override of a setting
the preset takes from the upstream (a batch size, the precision, the
protocol, the GPUs) still runs, but the result says it is not comparable,
and why. The record travels in the spec and lands in the result as
`comparability` (result schema).
"""
from __future__ import annotations

from hpcai.workloads.catalog import PRESET_KINDS, UPSTREAM, Preset, Workload

PROTOCOL_KEYS = ("warmup_epochs", "epochs", "steps_per_epoch")
# Parameters that change where results go or how long a server may take to start,
# never the measured work.
NEUTRAL = {"server_timeout_s", "server_stop_grace_s", "weights", "port"}


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _differences(params: dict, other: dict) -> dict[str, tuple]:
    """Setting -> (its value here, there) for each setting the two dicts differ in
    (a setting one of them lacks counts as None)."""
    absent = dict.fromkeys(set(params) | set(other))
    mine, theirs = {**absent, **params}, {**absent, **other}
    return {k: (mine[k], theirs[k]) for k in sorted(absent) if mine[k] != theirs[k]}


def assess(workload: Workload, preset: Preset, *, impl: str, params: dict, preset_params: dict,
           protocol: dict, device_type: str, gpus: int | None) -> dict:
    """The comparability record for a spec: its preset's kind, whether it is the
    paper's configuration, the reasons when not, and each setting's source."""
    reasons: list[str] = []
    if preset.kind != "paper":
        reasons.append(f"preset {preset.name!r} is {PRESET_KINDS.get(preset.kind, preset.kind)}, "
                       "not the paper's workload (use --preset paper)")
    else:
        # The implementation the upstream runs (declared Impl.upstream); another is hpcai's own.
        if impl != workload.upstream_impl:
            reasons.append(f"implementation {impl!r} is hpcai's own; the upstream runs "
                           f"{workload.upstream_impl!r}")
        for key, (mine, paper) in _differences(params, preset_params).items():
            if key in NEUTRAL:
                continue
            source = preset.source_of(key)
            reasons.append(f"{_flag(key)} {mine!r} overrides the paper preset's "
                           f"{paper!r}" + (f" ({source})" if source else ""))
        for key in PROTOCOL_KEYS:
            if protocol.get(key) != preset.protocol.get(key):
                reasons.append(f"{_flag(key)} {protocol.get(key)} overrides the paper preset's "
                               f"{preset.protocol.get(key)} ({preset.source_of('protocol')})")
        if device_type != "cuda":
            reasons.append("the run is on the CPU; the paper measured GPUs")
        elif preset.gpus is not None and gpus is not None and gpus != preset.gpus:
            reasons.append(f"--gpus {gpus}: the paper's runs use {preset.gpus} "
                           f"({preset.source_of('gpus')})")
    ours = preset.ours()
    # A per-GPU setting (the ViT batch) this GPU has no upstream value for stays the
    # preset's own choice: ours.
    per_gpu = {k for values in preset.by_gpu.values() for k in values}
    changed = _differences(preset_params, preset.params)
    for key in sorted(per_gpu):
        if key not in changed and key not in ours:
            ours.append(key)
    return {
        "preset_kind": preset.kind,
        "comparable_to_paper": not reasons,
        "reasons": reasons,
        "upstream": (preset.upstream or UPSTREAM) if preset.kind == "paper" else None,
        "sources": dict(preset.sources),
        "ours": ours,
        "known_differences": list(preset.known_differences),
    }
