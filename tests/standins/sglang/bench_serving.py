"""STAND-IN for SGLang 0.5.19's benchmark client, `python -m sglang.benchmark.serving`
(sglang/benchmark/serving.py; see this package's docstring). `python -m
sglang.bench_serving` runs it too, with the FutureWarning of the real alias
(sglang/bench_serving.py:1-22). The implementation lives here, and
sglang/benchmark/serving.py runs it.

Same flags as SGLang's client (those hpcai uses and a few more; unknown
flags are refused, as argparse does there), the same random-ids prompts,
the same request payload and streaming parser for the `sglang` backend, the
same metric formulas and result keys, the same result banner, and the JSON
line appended to --output-file. Line numbers below are of
sglang/benchmark/serving.py and sglang/benchmark/datasets/random.py in the
sglang-0.5.19 wheel. Where this differs: it runs requests on threads, not
asyncio; its random draws are Python's, not numpy's; it reads the
tokenizer with `tokenizers`, not transformers' AutoTokenizer.

As the real client: the ready check, /v1/models and /server_info go
through a proxy-aware HTTP client (`requests` there, urllib here: both obey
http_proxy and no_proxy), the generate streams through one that ignores
the environment's proxies (aiohttp without trust_env, serving.py:71-81;
http.client here).
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
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from sglang import failure_modes

BANNER = " Serving Benchmark Result "


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="sglang.benchmark.serving (stand-in)")
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
    p.add_argument("--warmup-requests", type=int, default=1)  # serving.py:2607-2611
    p.add_argument("--ready-check-timeout-sec", type=int, default=60)  # serving.py:2230-2235
    p.add_argument("--tokenize-prompt", action="store_true")  # serving.py:2612-2616
    p.add_argument("--sharegpt-output-len", type=int)
    p.add_argument("--tag")
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
    """np.mean/median/std/percentile of `values or 0` (serving.py:1242-1267)."""
    values = values or [0.0]
    return {"mean": statistics.fmean(values), "median": statistics.median(values),
            "std": statistics.pstdev(values), "p90": percentile(values, 90),
            "p95": percentile(values, 95), "p99": percentile(values, 99)}


def sample_requests(args, tokenizer):
    """random-ids (datasets/random.py:146-158): consecutive ids from a random
    offset; decoded to text unless --tokenize-prompt (random.py:38, :155-156),
    one id shorter per special token the tokenizer adds (random.py:78-82)."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=False)
    special = 0 if args.tokenize_prompt else tokenizer.num_special_tokens_to_add(False)
    rows = []
    for i in range(args.num_prompts):
        in_len = random.randint(int(args.random_input_len * args.random_range_ratio),
                                args.random_input_len)
        out_len = random.randint(int(args.random_output_len * args.random_range_ratio),
                                 args.random_output_len)
        in_len = in_len if args.tokenize_prompt else max(1, in_len - special)
        offset = random.randrange(vocab)
        ids = [(offset + i + j) % vocab for j in range(in_len)]
        rows.append((ids if args.tokenize_prompt else tokenizer.decode(ids), in_len, out_len))
    return rows


def send(host, port, prompt, prompt_len, output_len, args):
    """async_request_sglang_generate (serving.py:657-773)."""
    out = {"success": False, "ttft": 0.0, "itl": [], "latency": 0.0, "output_len": output_len,
           "prompt_len": prompt_len, "generated_text": "", "error": "", "start_time": 0.0}
    _stream(host, port, prompt, output_len, args, out)  # fills out; errors land in out["error"]
    return SimpleNamespace(**out)  # a RequestFuncOutput's fields (serving.py:99-115)


def _stream(host, port, prompt, output_len, args, out):
    # "text" for a string prompt, "input_ids" for ids (serving.py:673)
    payload = {("text" if isinstance(prompt, str) else "input_ids"): prompt,
               "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len,
                                   "ignore_eos": not args.disable_ignore_eos},
               "stream": not args.disable_stream}
    st = time.perf_counter()
    out["start_time"] = most_recent = st
    last_output_len = 0
    try:
        conn = http.client.HTTPConnection(host, port, timeout=600)
        conn.request("POST", "/generate", json.dumps(payload), {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            out["error"] = (response.reason or "") + ": " + response.read().decode()
            return
        latency = 0.0
        for raw in response:
            line = raw.strip()
            if not line:
                continue
            chunk = line[6:] if line.startswith(b"data: ") else line
            latency = time.perf_counter() - st  # serving.py:721, also for [DONE]
            if chunk == b"[DONE]":
                continue
            data = json.loads(chunk)
            if data.get("text"):
                timestamp = time.perf_counter()
                out["generated_text"] = data["text"]
                out["output_len"] = data["meta_info"]["completion_tokens"]
                if out["ttft"] == 0.0:
                    out["ttft"] = time.perf_counter() - st
                else:
                    # A chunk of several tokens: its gap spread over them (serving.py:749-761).
                    new_tokens = out["output_len"] - last_output_len
                    if new_tokens == 0:
                        continue
                    out["itl"].extend([(timestamp - most_recent) / new_tokens] * new_tokens)
                most_recent, last_output_len = timestamp, out["output_len"]
        out["latency"] = latency
        out["success"] = True
    except Exception as exc:  # the real client records the traceback text
        out["error"] = repr(exc)


def get(url, timeout=None):
    """GET through the environment's proxies, as `requests.get` does; (status, JSON or None)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def wait_for_endpoint(url, timeout_sec):
    """serving.py:151-169: poll url every 1 s until it answers 200."""
    print(f"Waiting up to {timeout_sec}s for {url} to become ready...", flush=True)
    start = time.perf_counter()
    while True:
        try:
            if get(url, timeout=5)[0] == 200:
                print(f"Server ready in {time.perf_counter() - start:.1f}s.", flush=True)
                return True
        except OSError:
            pass
        if time.perf_counter() - start >= timeout_sec:
            print(f"Server did not become ready within {timeout_sec}s timeout.", flush=True)
            return False
        time.sleep(1)


def busiest_second(outputs):
    """max_output_tokens_per_s and max_concurrent_requests (serving.py:1163-1204)."""
    done = [o for o in outputs if o.success]
    if not done:
        return 0.0, 0
    first = min(o.start_time for o in done)
    last = max(o.start_time + o.latency for o in done)
    seconds = int(math.ceil(last - first)) + 1
    tokens, requests = [0] * seconds, [0] * seconds
    for o in done:
        times = [o.start_time + o.ttft]
        for gap in o.itl:
            times.append(times[-1] + gap)
        for t in times:
            if 0 <= int(t - first) < seconds:
                tokens[int(t - first)] += 1
        for second in range(int(o.start_time - first),
                            min(int(o.start_time + o.latency - first) + 1, seconds)):
            requests[second] += 1
    return float(max(tokens)), int(max(requests))


def calculate_metrics(input_requests, outputs, dur_s, tokenizer, backend, accept_length=None,
                      plot_throughput=False):
    """serving.py:1095-1273, its signature (keyword arguments, `outputs` the
    RequestFuncOutputs in request order); the figures the result line needs."""
    done = [o for o in outputs if o.success]
    output_lens = [o.output_len if o.success else 0 for o in outputs]
    ttfts = [o.ttft for o in done]
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in done if o.output_len > 1]
    itls = [x for o in done for x in o.itl]
    e2e = [o.latency for o in done]
    ms = {name: {k: v * 1000 for k, v in stats(vals).items()}
          for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2e_latency", e2e))}
    max_tokens_per_s, max_requests = busiest_second(outputs)
    return {"done": done, "output_lens": output_lens, "total_input": sum(o.prompt_len for o in done),
            "ms": ms, "e2e": e2e, "max_tokens_per_s": max_tokens_per_s, "max_requests": max_requests,
            "retok": sum(len(tokenizer.encode(o.generated_text, add_special_tokens=False).ids)
                         for o in done)}


def cli_main():
    """serving.py:2207: parse sys.argv and run."""
    sys.exit(main())


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

    if args.tokenize_prompt and args.backend != "sglang":  # serving.py:2001-2004
        raise SystemExit("`--tokenize-prompt` only compatible with `--backend sglang` currently")
    random.seed(args.seed)
    host, port = args.host, args.port or 30000
    base_url = f"http://{host}:{port}"
    # serving.py:2024, :2038-2042: wait for /v1/models, exit 1 if it never answers.
    if args.ready_check_timeout_sec > 0 and not wait_for_endpoint(f"{base_url}/v1/models",
                                                                  args.ready_check_timeout_sec):
        print(f"Server at {base_url}/v1/models is not ready. Exiting.", flush=True)
        return 1
    tokenizer = Tokenizer.from_file(str(Path(args.tokenizer or args.model) / "tokenizer.json"))
    rows = sample_requests(args, tokenizer)
    print(f"#Input tokens: {sum(r[1] for r in rows)}\n#Output tokens: {sum(r[2] for r in rows)}")
    for _ in range(args.warmup_requests):
        send(host, port, rows[0][0], rows[0][1], min(rows[0][2], 32), args)
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...",
          flush=True)  # serving.py:1459-1461
    time.sleep(1.0)  # serving.py:1472 (the cache flush before it needs SGLANG_IS_IN_CI)
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
    get(f"{base_url}/server_info")  # serving.py:1590-1592, inside the timed span
    duration = time.perf_counter() - start  # serving.py:1612

    # Looked up here, at call time, as serving.py:1613 does (hpcai's client wrapper wraps it).
    m = calculate_metrics(input_requests=rows, outputs=outputs, dur_s=duration, tokenizer=tokenizer,
                          backend=args.backend)
    done, output_lens, total_input, ms, retok = (m["done"], m["output_lens"], m["total_input"],
                                                 m["ms"], m["retok"])
    e2e, max_tokens_per_s, max_requests = m["e2e"], m["max_tokens_per_s"], m["max_requests"]
    status, server_info = get(f"{base_url}/server_info")  # serving.py:1787-1788
    # The keys, in the order of serving.py:1797-1848.
    result = {
        "tag": args.tag, "backend": args.backend, "dataset_name": args.dataset_name,
        "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len, "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "server_info": server_info if status == 200 else None,
        "duration": duration, "completed": len(done),
        "total_input_tokens": total_input, "total_input_text_tokens": total_input,
        "total_input_vision_tokens": 0, "total_output_tokens": sum(output_lens),
        "total_output_tokens_retokenized": retok,
        "request_throughput": len(done) / duration,
        "input_throughput": total_input / duration,
        "output_throughput": sum(output_lens) / duration,
        "total_throughput": (total_input + sum(output_lens)) / duration,
    }
    for name in ("e2e_latency", "ttft", "tpot", "itl"):
        for q in ("mean", "median", "std", "p90", "p95", "p99"):
            result[f"{q}_{name}_ms"] = ms[name][q]
    result.update({"concurrency": sum(e2e) / duration, "accept_length": None,
                   "max_output_tokens_per_s": max_tokens_per_s, "max_concurrent_requests": max_requests})
    print("\n{s:{c}^{n}}".format(s=BANNER, n=50, c="="), flush=True)
    print("{:<40} {:<10}".format("Successful requests:", len(done)))
    print("{:<40} {:<10.2f}".format("Benchmark duration (s):", duration))
    print("{:<40} {:<10.2f}".format("Output token throughput (tok/s):", result["output_throughput"]))
    print("=" * 50, flush=True)
    if args.output_details:  # serving.py:1882-1889, :1898-1901: seconds here, not ms
        result |= {"input_lens": [o.prompt_len for o in outputs], "output_lens": output_lens,
                   "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs],
                   "generated_texts": [o.generated_text for o in outputs],
                   "errors": [o.error for o in outputs]}
    if args.output_file:
        with open(args.output_file, "a") as fh:
            fh.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    import warnings

    warnings.warn("`sglang.bench_serving` is deprecated and will be removed in a future "
                  "release; use `sglang.benchmark.serving` instead "
                  "(e.g. `python -m sglang.benchmark.serving`).", FutureWarning, stacklevel=1)
    sys.exit(main())
