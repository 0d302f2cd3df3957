"""STAND-IN for `python -m sglang.benchmark.serving`, SGLang 0.5.19's benchmark
client; the implementation is in sglang/bench_serving.py (see there)."""
import sys

from sglang.bench_serving import calculate_metrics, cli_main, main  # noqa: F401 (the real module's names)

if __name__ == "__main__":
    sys.exit(main())
