"""SGLang's own benchmark client, run unchanged, with each request's send time
and latency recorded beside its result.

`python -m hpcai.workloads.sglang_client REQUESTS_FILE ARGS...` runs
`sglang.benchmark.serving` with ARGS. SGLang's client keeps, per request, the
perf_counter time it was sent (`start_time`) and its latency, but writes
neither to its output file (sglang/benchmark/serving.py:1882-1903 in 0.5.19:
input_lens, output_lens, ttfts, itls, generated_texts, errors). So, as
SGLang's own `sglang.benchmark.steady_state_serving` does
(steady_state_serving.py:75-99), this wraps the client's
`calculate_metrics` to see its `outputs`, and writes REQUESTS_FILE: per
request start, latency, ttft, itl, output_len and success, in the client's
own order, with the offset that turns its perf_counter times into wall time
(taken in the client's process). Every request, every timestamp and every
figure is still SGLang's.
"""
from __future__ import annotations

import inspect
import json
import os
import sys
import time


def records(outputs) -> list[dict]:
    return [{"start": float(o.start_time), "latency": float(o.latency), "ttft": float(o.ttft),
             "itl": [float(x) for x in o.itl], "output_len": int(o.output_len),
             "success": bool(o.success)} for o in outputs]


def write_requests(path: str, outputs) -> None:
    doc = {"format": 1, "clock": "perf_counter of the client process",
           "wall_minus_perf_s": time.time() - time.perf_counter(), "requests": records(outputs)}
    # Not hpcai.safe_files: this runs in SGLang's client environment, where hpcai may
    # not be installed (tests/integration/test_sglang_client.py runs it so).
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def install_capture(serving, path: str) -> None:
    """Wrap calculate_metrics where the client looks it up."""
    original = serving.calculate_metrics
    signature = inspect.signature(original)
    home = sys.modules.get(original.__module__, serving)

    def capture(*args, **kwargs):
        write_requests(path, signature.bind(*args, **kwargs).arguments["outputs"])
        return original(*args, **kwargs)

    for module in {serving, home}:
        module.calculate_metrics = capture


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        raise SystemExit("usage: python -m hpcai.workloads.sglang_client REQUESTS_FILE ARGS...")
    path, rest = argv[0], argv[1:]
    from sglang.benchmark import serving

    install_capture(serving, path)
    sys.argv = [sys.argv[0], *rest]
    serving.cli_main()


if __name__ == "__main__":
    # Run by its path, its own folder (hpcai's workloads/, which has a datasets.py)
    # would come first on sys.path and shadow the client's imports (HuggingFace's
    # `datasets`, imported by sglang.benchmark.datasets): it must not be searched.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    main()
