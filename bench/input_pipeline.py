"""`make bench`: the input pipeline's cost, as a ratio from one run.

ResNet-50 `short` (224x224, batch 8) trained through the real launcher twice
per round, interleaved: on synthetic images preloaded on the device (the
default, the seed paper's protocol) and on JPEG files from storage
(`hpcai-launch data make` + `--data`: a DataLoader with workers, decode,
random resized crop, flip). Reported: throughput from storage / preloaded,
the data-wait share of the storage runs and their read bandwidth.

The dataset is written once to a temporary folder; after the first epoch it
sits in the page cache, so the ratio measures decode and augmentation, not the
disk (a dataset larger than memory, `data make --samples` large, measures the
disk too). On a CPU-only machine the loader's workers share the cores with
training, which is the worst case for the pipeline.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def hpcai(env: dict, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench step failed: hpcai-launch {' '.join(args)}\n{done.stderr[-2000:]}")
    return done


def newest(out: Path) -> dict:
    return json.loads(max(out.glob("*/result.json"), key=lambda p: p.stat().st_mtime).read_text())


def measure(rounds: int, samples: int, workers: int | None, extra: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="hpcai-bench-data-") as tmp:
        data = Path(tmp) / "jpegs"
        hpcai(env, "data", "make", "resnet50", "--samples", str(samples), "-o", str(data))
        args = ["resnet50", "--preset", "short", "--runtime", "host", "--no-telemetry", *extra]
        loader = ["--data", str(data)] + (["--data-workers", str(workers)] if workers is not None else [])
        preloaded, stored, shares, bandwidths = [], [], [], []
        for i in range(rounds):
            order = [("preloaded", []), ("storage", loader)]
            if i % 2:  # alternate which goes first: drift hits both alike
                order.reverse()
            for name, more in order:
                folder = out / name
                hpcai(env, *args, *more, "-o", str(folder))
                doc = newest(folder)
                tp = doc["throughput"]["node"]
                (preloaded if name == "preloaded" else stored).append(tp)
                line = f"  round {i + 1} {name:<9}: {tp:8.2f} images/s (node)"
                if name == "storage":
                    shares.append(doc["input"]["data_wait_share"])
                    bandwidths.append(doc["input"]["read_bandwidth_node_bytes_per_s"])
                    line += (f", data wait {shares[-1]:.1%}, read "
                             f"{bandwidths[-1] / 1e6:.1f} MB/s, {doc['input']['workers']} worker(s)")
                print(line, flush=True)
    ratio = statistics.fmean(stored) / statistics.fmean(preloaded)
    return {"rounds": rounds, "samples": samples, "preloaded_images_per_s": preloaded,
            "storage_images_per_s": stored, "ratio_storage_over_preloaded": ratio,
            "per_round_ratio": [s / p for s, p in zip(stored, preloaded)],
            "data_wait_share": shares, "read_bandwidth_bytes_per_s": bandwidths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="A/B pairs")
    parser.add_argument("--samples", type=int, default=512, help="JPEGs in the dataset")
    parser.add_argument("--data-workers", type=int, help="DataLoader workers (default: hpcai's)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "input-pipeline"))
    args, extra = parser.parse_known_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("input pipeline: resnet50 short, preloaded synthetic images vs JPEGs from storage:")
    result = measure(args.rounds, args.samples, args.data_workers, extra, out)
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(f"{'measure':<48} {'value':>12}")
    print(f"{'throughput, from storage / preloaded':<48} "
          f"{result['ratio_storage_over_preloaded']:>12.3f}")
    print(f"{'  per round, min .. max':<48} {min(result['per_round_ratio']):>5.3f} .. "
          f"{max(result['per_round_ratio']):.3f}")
    print(f"{'data-wait share of the storage runs (mean)':<48} "
          f"{statistics.fmean(result['data_wait_share']):>12.2%}")
    print(f"{'read bandwidth, storage runs (MB/s, node)':<48} "
          f"{statistics.fmean(result['read_bandwidth_bytes_per_s']) / 1e6:>12.2f}")
    print(f"report: {out / 'bench.json'}")


if __name__ == "__main__":
    main()
