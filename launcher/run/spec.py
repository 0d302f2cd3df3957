"""Builds the run spec (hpcai/spec.py's RunSpec): everything needed to repeat a
run. The launcher places it (run id, folder, sweep slot, node), each placing a
new spec; its JSON travels to the entrypoint and is kept in the result.
"""
from __future__ import annotations

import re
import socket
from pathlib import Path
from datetime import datetime, timezone

from hpcai.errors import UsageError
from hpcai.spec import SPEC_VERSION, Devices, Power, Protocol, RunSpec, freeze
from hpcai.workloads.catalog import PROTOCOL_DEFAULTS, Workload


def make_run_id(workload: str, preset: str, cap_w: float | None) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")[:-4]
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])
    cap = f"-cap{cap_w:g}W" if cap_w is not None else ""
    return f"{stamp}-{host}-{workload}-{preset}{cap}"


def build_spec(
    workload: Workload,
    preset_name: str,
    *,
    impl: str,
    overrides: dict,
    protocol_overrides: dict,
    device_type: str,
    vendor: str | None,
    nproc: int,
    gpu_indices: list[int] | None,
    cap_w: float | None,
    power_method: str,
    cap_tolerance_frac: float,
    node_overhead_w: float,
    site: dict,
    output_dir: str,
    runtime: dict,
    seed: int = 0,
    gpu_name: str | None = None,
    gpu_memory_bytes: int | None = None,
) -> RunSpec:
    """gpu_name and gpu_memory_bytes: the model of the run's GPUs (NVML/amdsmi's name)
    and its memory, for settings a preset sets per GPU (the paper's ViT-L/16 batch on
    its 94 GB H100 and on MI300X)."""
    from hpcai.launcher.run.comparability import assess

    preset = workload.preset(preset_name)
    workload.refuse_unhonoured(impl, overrides)
    # A preset's generic setting this implementation ignores (the fast preset's
    # channels-last under --impl tensorflow) is left out, not recorded as applied.
    preset_params = workload.without_unhonoured(impl, preset.resolve(gpu_name, vendor, gpu_memory_bytes))
    params = {**preset_params, **{k: v for k, v in overrides.items() if v is not None}}
    protocol = _resolve_protocol(preset, protocol_overrides)
    typed = workload.params.from_dict(params)
    if typed.batch_size not in ("auto", "unlimited", None) and int(typed.batch_size) < 1:
        raise UsageError("--batch-size must be at least 1", f"got {typed.batch_size}")
    if typed.data and workload.data_format == "npy":
        _check_dataset_shape(workload, typed)
    run_id = make_run_id(workload.name, preset.name, cap_w)
    comparability = assess(workload, preset, impl=impl, params=params,
                           preset_params=preset_params, protocol=protocol,
                           device_type=device_type,
                           gpus=len(gpu_indices) if device_type == "cuda" and gpu_indices else None)
    return RunSpec(
        spec_version=SPEC_VERSION, run_id=run_id, workload=workload.name, impl=impl,
        preset=preset.name, preset_kind=preset.kind, params=freeze(params),
        # Parameters the command line set over the preset's.
        overridden=tuple(sorted(k for k, v in overrides.items() if v is not None)),
        comparability=freeze(comparability), protocol=Protocol.from_json(protocol),
        devices=Devices(type=device_type, vendor=vendor or "auto", nproc=nproc,
                        gpu_indices=freeze(gpu_indices)),
        power=Power(cap_w=cap_w, method=power_method, cap_tolerance_frac=cap_tolerance_frac,
                    node_overhead_w=node_overhead_w),
        site=freeze(site), runtime=freeze(runtime), output_dir=output_dir, seed=seed,
    )


def _resolve_protocol(preset, protocol_overrides: dict) -> dict:
    """The defaults, then the preset's protocol, then the command line's; checked."""
    protocol = {**PROTOCOL_DEFAULTS, **preset.protocol,
                **{k: v for k, v in protocol_overrides.items() if v is not None}}
    protocol.setdefault("telemetry", True)
    if protocol.get("stall_timeout_s") is None:  # the watchdog's default for this preset's kind
        from hpcai.launcher.run.stall import default_timeout_s

        protocol["stall_timeout_s"] = default_timeout_s(preset.kind)
    if not 0 < float(protocol["stall_timeout_s"]) < float("inf"):
        raise UsageError("--stall-timeout-s must be a positive number of seconds",
                         f"got {protocol['stall_timeout_s']}")
    for key in ("warmup_epochs", "epochs", "steps_per_epoch"):
        minimum = 0 if key == "warmup_epochs" else 1
        if int(protocol[key]) < minimum:
            raise UsageError(f"--{key.replace('_', '-')} must be at least {minimum}",
                             f"got {protocol[key]}")
    if not 0.01 <= float(protocol["sample_interval_s"]) <= 10:
        raise UsageError("--sample-interval-ms must be between 10 and 10000",
                         "100 ms is the protocol's default")
    return protocol


def _check_dataset_shape(workload, params) -> None:
    """Volumes from storage must have the shape the model is built for (images are
    cropped to any size; a cube of another edge would only fail inside the model)."""
    from hpcai.workloads import datasets

    manifest = datasets.load_manifest(Path(params.data), workload.name)
    wanted = datasets.sample_shape(workload.data_format, params)
    if list(manifest["sample_shape"]) != wanted:
        have = "x".join(map(str, manifest["sample_shape"]))
        raise UsageError(f"{params.data} holds samples of shape {have}, this run needs "
                         f"{'x'.join(map(str, wanted))}",
                         f"make one of that shape (hpcai-launch data make {workload.name} "
                         f"--preset/--cube) or run with the dataset's")
