"""STAND-IN for `python -m sglang.benchmark.serving`, SGLang 0.5.19's benchmark
client; the implementation is in sglang/bench_serving.py (see there)."""
import sys

from sglang.bench_serving import main

if __name__ == "__main__":
    sys.exit(main())
