"""A builder of crafted result documents for the report's tests: schema-valid
results with chosen numbers (GPU, cap, throughput, energy), so table values
can be checked against figures worked out by hand.

The numbers are self-consistent the way the entrypoint makes them: node
throughput = per-GPU x GPUs, measured units = node throughput x window,
energy = mean power per GPU x GPUs x window.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

_counter = iter(range(10**6))


def make_result(*, workload="resnet50", preset="paper", gpu="NVIDIA H100 80GB HBM3",
                vendor="nvidia", gpus=4, cap_w=300.0, enforced=True, per_gpu=1000.0,
                epochs=None, power_per_gpu_w=250.0, window_s=10.0, overhead_w=100.0,
                status="complete", site="default", sm_clock=1500.0, memory_clock=2619.0,
                repeat=None, sweep_id=None, device_type="cuda", unit="images",
                cpu_model="Test CPU", run_id=None, default_limit_w=700.0) -> dict:
    """One node's result. epochs: per-GPU throughput of each measured epoch
    (default: three epochs equal to per_gpu)."""
    epochs = list(epochs) if epochs is not None else [per_gpu] * 3
    node = per_gpu * gpus
    units = round(node * window_s)  # the schema counts whole images/tokens
    power_on = device_type == "cuda"  # crafted CPU results have no power source
    energy = power_per_gpu_w * gpus * window_s if power_on else None
    run_id = run_id or f"crafted-{next(_counter):04d}-{workload}-{gpu.split()[-1]}-cap{cap_w}"
    used = [{
        "index": i, "vendor": vendor, "name": gpu, "uuid": f"GPU-crafted-{i}",
        "memory_total_bytes": 80 * 1024**3, "used": True, "samples": 100,
        "power_w": {"mean": power_per_gpu_w, "median": power_per_gpu_w,
                    "p95": power_per_gpu_w, "max": power_per_gpu_w},
        "energy_j": {"counter": power_per_gpu_w * window_s,
                     "integrated": power_per_gpu_w * window_s, "used": "counter"},
        "sm_clock_mhz_mean": sm_clock, "memory_clock_mhz_mean": memory_clock,
        "limits": {"default_w": default_limit_w, "min_w": 200.0, "max_w": default_limit_w,
                   "requested_w": cap_w, "applied_w": cap_w if cap_w else default_limit_w},
        "cap_held": enforced if cap_w is not None else None,
    } for i in range(gpus if device_type == "cuda" else 0)]
    per_epoch_node = [e * gpus for e in epochs]
    mean = statistics.fmean(per_epoch_node)
    std = statistics.stdev(per_epoch_node) if len(per_epoch_node) > 1 else None
    spec = {
        "spec_version": 1, "run_id": run_id, "workload": workload, "impl": "pytorch",
        "preset": preset, "params": {"batch_size": 256},
        "protocol": {"warmup_epochs": 1, "epochs": len(epochs), "steps_per_epoch": 50,
                     "sample_interval_s": 0.1, "telemetry": True},
        "devices": {"type": device_type, "vendor": vendor or "auto", "nproc": gpus,
                    "gpu_indices": list(range(gpus)) if device_type == "cuda" else None},
        "power": {"cap_w": cap_w, "method": "nvml", "cap_tolerance_frac": 0.05,
                  "node_overhead_w": overhead_w},
        "site": {"name": site, "path": f"/sites/{site}.toml"},
        "runtime": {"kind": "host", "image": None}, "output_dir": "/nowhere", "seed": 0,
    }
    if sweep_id is not None:
        spec["sweep"] = {"id": sweep_id, "key": sweep_id, "position": 0,
                         "repeat": repeat or 0, "repeats": 2, "order": "shuffle", "seed": 1}
    with_overhead = energy + overhead_w * window_s if energy is not None else None
    doc = {
        "schema_version": "1.0", "kind": "hpcai.result", "status": status,
        "error": None if status == "complete" else {"type": "WorkloadError", "message": status},
        "run_id": run_id, "workload": workload, "spec": spec,
        "timestamps": {"started": "2026-01-01T00:00:00+00:00",
                       "finished": "2026-01-01T00:01:00+00:00",
                       "measured_start": 1000.0, "measured_end": 1000.0 + window_s},
        "host": {"hostname": f"node-{site}", "node": f"node-{site}", "scheduler": None,
                 "job_id": None, "cpu_model": cpu_model, "cpu_count": 64},
        "software": {"hpcai": "0.1.0", "hpcai_commit": None, "python": "3.11.7"},
        "runtime": {"kind": "host", "image": None},
        "config": {"device_type": device_type, "processes": gpus},
        "protocol": {"warmup_epochs": 1, "epochs": len(epochs), "steps_per_epoch": 50,
                     "sample_interval_s": 0.1, "sample_interval_achieved_s": None,
                     "samples": 100, "epochs_completed": len(epochs) + 1,
                     "measured_epochs_completed": len(epochs)},
        "epochs": [],
        "throughput": {"unit": f"{unit}/s", "node": node, "per_gpu": per_gpu,
                       "per_epoch_node": per_epoch_node,
                       "stats_node": {"epochs": len(epochs), "mean": mean, "std": std,
                                      "ci95": None, "cv": std / mean if std else None}},
        "work": {"unit": unit, "measured_units": units,
                 # the seconds those whole units took at this throughput (recompute.py holds them to it)
                 "measured_seconds": units / node if node and units else window_s,
                 "first_loss": 7.0, "last_loss": 6.0},
        "gpus": used,
        "power": {
            "available": energy is not None,
            "reason": None if energy is not None else "no power source on this test node",
            "source": vendor if energy is not None else None,
            "energy_source": "counter" if energy is not None else None,
            "window_s": window_s, "energy_j": energy,
            "mean_power_w": energy / window_s if energy is not None else None,
            "node_overhead_w": overhead_w,
            "energy_with_overhead_j": with_overhead,
            "energy_per_unit_j": energy / units if energy is not None else None,
            "units_per_joule": units / energy if energy is not None else None,
            "units_per_joule_with_overhead": units / with_overhead if with_overhead else None,
            "cap": {"requested_w": cap_w, "tolerance_frac": 0.05, "statistic": "median",
                    "enforced": enforced if cap_w is not None else None},
        },
        "memory": None,
        "sidecar": {"samples": None},
        "launcher": {"command_exit_code": 0},  # finished by its launcher
    }
    return doc


def write_result(folder: Path, doc: dict, samples: bool = False) -> Path:
    """Write doc as folder/<run_id>/result.json (and a small samples.csv if asked)."""
    run_dir = Path(folder) / doc["run_id"]
    run_dir.mkdir(parents=True, exist_ok=True)
    if samples:
        doc["sidecar"]["samples"] = "samples.csv"
        lines = [("t,source,power_w,energy_j,sm_clock_mhz,memory_clock_mhz,temperature_c,"
                 "utilization_pct,memory_used_bytes,power_limit_w,throttle_reasons")]
        for i in range(40):
            t = 999.0 + i * 0.3
            for g in doc["gpus"]:
                watts = g["power_w"]["mean"] * (0.3 if t < 1000.0 else 1.0)
                lines.append(f"{t:.4f},gpu{g['index']},{watts:.3f},,,,,,,,")
        (run_dir / "samples.csv").write_text("\n".join(lines) + "\n")
    path = run_dir / "result.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def crafted_set(folder: Path) -> dict[str, dict]:
    """The report tests' data: two GPUs, repeats, an unenforced cap, a failed
    run, a CPU run and a second site. Hand-worked figures (100 W overhead):

    H100 x4:  200 W  800 img/s per GPU, 200 W/GPU -> 32000 img / (8000+1000) J = 3.5556 img/J
              300 W  1000 and 1100 (two repeats), 280 W/GPU -> 3.27869 and 3.60656, mean 3.44262
              400 W  1150, 380 W/GPU -> 46000 / 16200 = 2.83951
    MI300X x4: 200 W (not enforced) 771.68 at 300 W/GPU -> 30867 / 13000 = 2.37438
              400 W  924.17 at 390 W/GPU -> 36967 / 16600 = 2.22693
              750 W  1525.1 at 700 W/GPU -> 61004 / 29000 = 2.10359
    """
    docs = {
        "h100-200": make_result(cap_w=200.0, per_gpu=800.0, power_per_gpu_w=200.0,
                                epochs=[790.0, 800.0, 810.0], sm_clock=1200.0),
        "h100-300a": make_result(cap_w=300.0, per_gpu=1000.0, power_per_gpu_w=280.0,
                                 repeat=0, sweep_id="sweep-a", sm_clock=1600.0),
        "h100-300b": make_result(cap_w=300.0, per_gpu=1100.0, power_per_gpu_w=280.0,
                                 repeat=1, sweep_id="sweep-a", sm_clock=1700.0),
        "h100-400": make_result(cap_w=400.0, per_gpu=1150.0, power_per_gpu_w=380.0,
                                sm_clock=1900.0),
        "h100-500-failed": make_result(cap_w=500.0, per_gpu=1300.0, status="failed"),
        "mi300x-200": make_result(gpu="AMD Instinct MI300X", vendor="amd", cap_w=200.0,
                                  enforced=False, per_gpu=771.68, power_per_gpu_w=300.0,
                                  default_limit_w=750.0),
        "mi300x-400": make_result(gpu="AMD Instinct MI300X", vendor="amd", cap_w=400.0,
                                  per_gpu=924.17, power_per_gpu_w=390.0, default_limit_w=750.0),
        "mi300x-750": make_result(gpu="AMD Instinct MI300X", vendor="amd", cap_w=750.0,
                                  per_gpu=1525.1, power_per_gpu_w=700.0, default_limit_w=750.0),
    }
    for name, doc in docs.items():
        write_result(folder, doc, samples=name == "h100-200")
    return docs
