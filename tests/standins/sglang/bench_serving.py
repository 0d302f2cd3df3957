"""STAND-IN for `python -m sglang.bench_serving` (see this package's docstring).

Same flags as SGLang's client (those hpcai uses and a few more; unknown
flags are refused, as argparse does there), the same random-ids prompts,
the same request payload and streaming parser for the `sglang` backend, the
same metric formulas and result keys, the same result banner, and the JSON
line appended to --output-file.
"""
import argparse
import http.client
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

from sglang import failure_modes

BANNER = " Serving Benchmark Result "


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="sglang.bench_serving (stand-in)")
    p.add_argument("--backend", default="sglang", choices=["sglang", "sglang-native"])
    p.add_argument("--base-url")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int)
    p.add_argument("--dataset-name", default="sharegpt",
                   choices=["sharegpt", "random", "random-ids", "generated-shared-prefix"])
    p.add_argument("--dataset-path", default="")
    p.add_argument("--model")
    p.add_argument("--tokenizer")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--max-concurrency", type=int)
    p.add_argument("--output-file")
    p.add_argument("--output-details", action="store_true")
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--disable-stream", action="store_true")
    p.add_argument("--disable-ignore-eos", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup-requests", type=int, default=1)
    return p.parse_args(argv)


def percentile(values, q):
    """numpy.percentile's default (linear) method."""
    values = sorted(values)
    if not values:
        return 0.0
    k = (len(values) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def stats(values):
    values = values or [0.0]
    return {"mean": statistics.fmean(values), "median": statistics.median(values),
            "std": statistics.pstdev(values), "p95": percentile(values, 95),
            "p99": percentile(values, 99), "max": max(values)}


def sample_requests(args, tokenizer):
    """random-ids: consecutive ids from a random offset, decoded to text."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=False)
    rows = []
    for i in range(args.num_prompts):
        in_len = random.randint(int(args.random_input_len * args.random_range_ratio),
                                args.random_input_len)
        out_len = random.randint(int(args.random_output_len * args.random_range_ratio),
                                 args.random_output_len)
        offset = random.randrange(vocab)
        ids = [(offset + i + j) % vocab for j in range(in_len)]
        rows.append((tokenizer.decode(ids), in_len, out_len))
    return rows


def send(host, port, prompt, prompt_len, output_len, args):
    out = {"success": False, "ttft": 0.0, "itl": [], "latency": 0.0, "output_len": 0,
           "prompt_len": prompt_len, "generated_text": "", "error": ""}
    payload = {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len,
                                                   "ignore_eos": not args.disable_ignore_eos},
               "stream": not args.disable_stream}
    st = time.perf_counter()
    last = st
    try:
        conn = http.client.HTTPConnection(host, port, timeout=600)
        conn.request("POST", "/generate", json.dumps(payload), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            out["error"] = response.reason or str(response.status)
            return out
        for raw in response:
            line = raw.decode().strip()
            if not line:
                continue
            chunk = line.removeprefix("data:").strip()
            if chunk == "[DONE]":
                continue
            data = json.loads(chunk)
            now = time.perf_counter()
            if out["ttft"] == 0.0:
                out["ttft"] = now - st
            else:
                out["itl"].append(now - last)
            last = now
            out["generated_text"] = data["text"]
            out["output_len"] = data["meta_info"]["completion_tokens"]
        out["latency"] = time.perf_counter() - st
        out["success"] = True
    except Exception as exc:  # the real client records the traceback text
        out["error"] = repr(exc)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"standin client pid={os.getpid()}", flush=True)
    # As SGLang's run_benchmark does first: the parsed arguments, so a log shows
    # the request mix the client really used.
    print(f"{args}\n", flush=True)
    if "client-crash" in failure_modes():
        print("stand-in bench_serving: crashing, as asked", flush=True)
        return 2
    from tokenizers import Tokenizer

    random.seed(args.seed)
    tokenizer = Tokenizer.from_file(str(Path(args.tokenizer or args.model) / "tokenizer.json"))
    host, port = args.host, args.port or 30000
    rows = sample_requests(args, tokenizer)
    print(f"#Input tokens: {sum(r[1] for r in rows)}\n#Output tokens: {sum(r[2] for r in rows)}")
    for _ in range(args.warmup_requests):
        send(host, port, rows[0][0], rows[0][1], min(rows[0][2], 32), args)
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...",
          flush=True)
    time.sleep(0.5)  # the real client sleeps 1 s here
    limit = threading.Semaphore(args.max_concurrency or len(rows))
    outputs = [None] * len(rows)

    def worker(i):
        with limit:
            outputs[i] = send(host, port, *rows[i], args)

    start = time.perf_counter()
    threads = []
    for i in range(len(rows)):
        thread = threading.Thread(target=worker, args=(i,))
        thread.start()
        threads.append(thread)
        if args.request_rate != float("inf"):
            time.sleep(random.expovariate(args.request_rate))
    for thread in threads:
        thread.join()
    duration = time.perf_counter() - start

    done = [o for o in outputs if o["success"]]
    output_lens = [o["output_len"] for o in done]
    total_input = sum(o["prompt_len"] for o in done)
    ttfts = [o["ttft"] for o in done]
    tpots = [(o["latency"] - o["ttft"]) / (o["output_len"] - 1) for o in done if o["output_len"] > 1]
    itls = [x for o in done for x in o["itl"]]
    e2e = [o["latency"] for o in done]
    ms = {name: {k: v * 1000 for k, v in stats(vals).items()}
          for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2e_latency", e2e))}
    retok = sum(len(tokenizer.encode(o["generated_text"]).ids) for o in done)
    result = {
        "backend": args.backend, "dataset_name": args.dataset_name,
        "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
        "random_input_len": args.random_input_len, "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "duration": duration, "completed": len(done),
        "total_input_tokens": total_input, "total_output_tokens": sum(output_lens),
        "total_output_tokens_retokenized": retok,
        "request_throughput": len(done) / duration,
        "input_throughput": total_input / duration,
        "output_throughput": sum(output_lens) / duration,
        "total_throughput": (total_input + sum(output_lens)) / duration,
        "concurrency": sum(e2e) / duration,
    }
    for name in ("e2e_latency", "ttft", "tpot"):
        for q in ("mean", "median", "std", "p99"):
            result[f"{q}_{name}_ms"] = ms[name][q]
    for q in ("mean", "median", "std", "p95", "p99", "max"):
        result[f"{q}_itl_ms"] = ms["itl"][q]
    print("\n{s:{c}^{n}}".format(s=BANNER, n=50, c="="), flush=True)
    print("{:<40} {:<10}".format("Successful requests:", len(done)))
    print("{:<40} {:<10.2f}".format("Benchmark duration (s):", duration))
    print("{:<40} {:<10.2f}".format("Output token throughput (tok/s):", result["output_throughput"]))
    print("=" * 50, flush=True)
    if args.output_file:
        with open(args.output_file, "a") as fh:
            fh.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
