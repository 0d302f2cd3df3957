"""`make bench`: the start-up cost of `--batch-size auto` on a GPU's path, as
ratios from one run on this machine's CPU.

The real ResNet-50 trainer (32x32 images, 10 classes, fp32) runs the GPU's
search (workloads/batch_search.py's find with on_gpu=True) on the CPU; only the
GPU's memory limit is a stand-in: a step over --limit images raises PyTorch's
own OutOfMemoryError, as in tests/unit/test_flops_and_batch_search.py. Three
starts, each from a freshly built trainer:

- eager largest-fit: the trial search alone (what `paper` presets do);
- the new search: the trial search, then the largest, half and a quarter timed;
- a cached start: the entry the new search wrote (hpcai/batch_cache.py, in a
  temporary state folder), re-validated by one step.

Reported: seconds of each and their ratios to the eager largest-fit. On a CPU
the inputs are re-made every step, and timings vary with the machine's load:
read the ratios, not the seconds, and nothing here is asserted.
"""
from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def trainer_with_limit(limit: int):
    """ResNet-50 on the CPU whose steps over `limit` images run 'out of memory'."""
    import torch

    from hpcai.workloads.distributed import Context
    from hpcai.workloads.resnet50 import ResNet50

    class StandInMemoryLimit(ResNet50):
        def step(self):
            if self.batch_size > limit:
                raise torch.OutOfMemoryError("stand-in: CUDA out of memory")
            return super().step()

    ctx = Context(0, 1, 0, 1, "cpu", torch.device("cpu"), None, 2, socket.gethostname())
    spec = {"workload": "resnet50", "preset": "tiny", "seed": 0,
            "params": {"batch_size": 8, "image_size": 32, "num_classes": 10, "precision": "fp32"}}
    trainer = StandInMemoryLimit(spec, ctx)
    trainer._set_lr(0.0)  # as the search runs: probes change no weight
    return trainer, ctx


def one_start(limit: int, start: int, fastest: bool, cache) -> dict:
    from hpcai.workloads import batch_search as bs

    trainer, ctx = trainer_with_limit(limit)
    began = time.perf_counter()
    record = bs.find(bs.torch_step_runner(trainer, ctx), on_gpu=True, start=start,
                     fastest=fastest, cache=cache)
    seconds = time.perf_counter() - began
    return {"seconds": seconds, "found": record["found"], "method": record["method"],
            "steps": len(record["probes"]) + sum(1 + t.get("steps", 0) for t in record.get("timings", []))}


def measure(limit: int, start: int) -> dict:
    from hpcai import batch_cache

    with tempfile.TemporaryDirectory(prefix="hpcai-bench-batch-cache-") as state:
        description = batch_cache.describe_key("stand-in GPU", None, "resnet50", "bench",
                                               {"image_size": 32, "limit": limit})
        cache = batch_cache.BatchCache(description, folder=Path(state))
        cases = {
            "eager largest-fit": one_start(limit, start, fastest=False, cache=None),
            "trial + throughput (new)": one_start(limit, start, fastest=True, cache=cache),
            "cached start": one_start(limit, start, fastest=True, cache=cache),
        }
    base = cases["eager largest-fit"]["seconds"]
    for case in cases.values():
        case["ratio_to_eager_largest_fit"] = case["seconds"] / base
    return {"limit": limit, "start": start, "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=32, help="the stand-in GPU's largest batch")
    parser.add_argument("--start", type=int, default=8, help="the search's start")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "batch-search"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"batch search start-up: resnet50 32x32 on the CPU, stand-in memory limit {args.limit}:")
    result = measure(args.limit, args.start)
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'start':<28} {'found':>6} {'steps':>6} {'seconds':>9} {'/ eager':>8}")
    for name, case in result["cases"].items():
        print(f"{name:<28} {case['found']:>6} {case['steps']:>6} {case['seconds']:>9.2f} "
              f"{case['ratio_to_eager_largest_fit']:>8.3f}")
    print(f"report: {out / 'bench.json'}")


if __name__ == "__main__":
    main()
