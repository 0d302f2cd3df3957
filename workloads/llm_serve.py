"""Llama-3-8B inference served by SGLang, loaded by SGLang's own benchmark
client (`python -m sglang.benchmark.serving`; SGLang 0.5.19, the images').

One entrypoint process (process model "single") runs the protocol:

1. writes the model folder (config.json + tokenizer) for random weights
   (`--load-format dummy`, no download), or uses `--weights DIR`;
2. starts `python -m sglang.launch_server` over the node's GPUs (tensor and
   data parallel sizes from --tp/--dp), its log kept in the result folder,
   and polls /model_info until it answers, with a timeout (`sglang serve`
   is the console-script form of the same server: it has no `python -m`
   form, and the server must run on this interpreter);
3. warm-up epochs: one wave of `batch_size` requests each, sent by hpcai to
   /generate at the measured lengths (CUDA graphs, caches, first batches);
4. the measured epoch: one run of SGLang's benchmark client, random token
   ids, `batch_size` requests in flight ("unlimited": all at once, as the
   seed paper sends them) and a Poisson request rate if given,
   `steps_per_epoch` requests; lengths fixed at --input-len/--output-len, or
   uniform from `length_range_ratio` of them up to them (the paper's mix:
   ratio 0, inputs up to 1024, outputs up to 256);
5. stops the server's process group on every path (SIGTERM, SIGKILL after
   `server_stop_grace_s`, kept under the launcher's 30 s grace); the server
   runs with SGL_FORCE_SHUTDOWN=1, so its SIGTERM handler does not wait for
   in-flight requests without limit (tokenizer_manager.py's sigterm_watchdog).

Server and client talk over loopback only: 127.0.0.1 and localhost are
added to no_proxy for both (SGLang's start-up probe and the client use
`requests`, which a site's http_proxy would otherwise catch), and hpcai's
own requests bypass any proxy.

Window: the client times the load itself (`duration`) but reports no
wall-clock times, so hpcai timestamps its output as it arrives. The client
prints "Warmup completed ... Starting main benchmark run...", sleeps 1.0 s
and starts its clock (benchmark/serving.py:1459-1498 in 0.5.19): the window
starts 1.0 s after that line and lasts `duration`. (The result banner comes
only after the client's statistics, up to a second later on a large load;
it is the fallback end when the start line is missing.) That is the whole
load, recorded as workload_metrics.window with the client's own figures.

The measured epoch, and so the result's throughput and energy, is the steady
state inside it (hpcai/measure/steady_state.py): from when the requests in
flight first reach the target concurrency (--batch-size; all requests when
"unlimited") until the first request of the ramp-down completes, from each
request's send time and latency as SGLang's client measured them (the
client runs through workloads/sglang_client.py, which records them). Ramp-up
and ramp-down get their own energy (workload_metrics.steady_state.phases).
Where no steady state exists (a Poisson rate that never fills the target,
say), the epoch stays the whole load and steady_state says why.

In-run cap sweeps (workloads/inrun.py, run(program=...)): steps 1-2 and the
warm-up run once; then per segment the program's settle epochs are hpcai's
waves (at most `batch_size` in flight, at least that many requests) and its
measured epoch is step 4, one load wave, its client files in the segment's
folder (`wave_dir`). Step 5 runs once, when the program ends.
"""
from __future__ import annotations

import json
import os
import random
import shlex
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hpcai.errors import UsageError, WorkloadError
from hpcai.workloads import concurrency_ramp
from hpcai.workloads import engine_process as proc
from hpcai.measure import steady_state
from hpcai.workloads import llm_assets
from hpcai.workloads.base import EngineWorkload
from hpcai.workloads.protocol import Epoch
from hpcai.workloads.registry.llama3_8b_inference import LlmServeParams

SERVER_LOG = "sglang-server.log"
CLIENT_LOG = "sglang-bench.log"
CLIENT_RESULT = "sglang-bench.jsonl"
# Per request: send time, latency, ttft, itl from SGLang's client (workloads/sglang_client.py).
CLIENT_REQUESTS = "sglang-bench-requests.json"
MODEL_DIR = "model"  # the generated config + tokenizer, for dummy weights
BANNER = "Serving Benchmark Result"
# The client's line just before its 1.0 s sleep and its clock's start (serving.py:1459-1498).
START_LINE = "Starting main benchmark run"
CLIENT_START_SLEEP_S = 1.0
CLIENT_MODULE = "sglang.benchmark.serving"  # sglang.bench_serving is a deprecated alias in 0.5.19
# Runs CLIENT_MODULE unchanged and records each request's timestamps beside its result.
CLIENT_WRAPPER = "hpcai.workloads.sglang_client"
READY_PATH = "/model_info"  # /get_model_info is a deprecated alias in 0.5.19
LOOPBACK = ("127.0.0.1", "localhost")
# Server flags hpcai sets itself, with SGLang's aliases (server_args.py), and the hpcai
# option that sets each: argparse keeps the last of a repeated flag, so --server-args
# would override them silently.
OWNED_SERVER_FLAGS = {
    "--model-path": "--weights or --model", "--model": "--weights or --model",
    "--host": "nothing (the server listens on 127.0.0.1)",
    "--port": "nothing (hpcai picks a free port)",
    "--tp-size": "--tp", "--tensor-parallel-size": "--tp",
    "--dp-size": "--dp", "--data-parallel-size": "--dp",
    "--random-seed": "--seed", "--load-format": "--weights (dummy weights without it)",
}
# Kept under the launcher's 30 s grace for its workload (launcher/run/process.py CHILD_GRACE_S).
MAX_SERVER_STOP_GRACE_S = 25.0
LATENCIES = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2e_latency"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parallel_sizes(tp: int | None, dp: int | None, gpus: int) -> tuple[int, int]:
    """Tensor- and data-parallel sizes that use exactly the run's GPUs."""
    for name, value in (("--tp", tp), ("--dp", dp)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1", f"got {value}")
    if tp is None and dp is None:
        tp, dp = 1, gpus
    elif dp is None:
        dp = gpus // tp if gpus % tp == 0 else 0
    elif tp is None:
        tp = gpus // dp if gpus % dp == 0 else 0
    if not tp or not dp or tp * dp != gpus:
        raise UsageError(f"--tp {tp or '?'} x --dp {dp or '?'} does not use the run's {gpus} GPU(s)",
                         "choose sizes whose product is the number of GPUs (see --gpus)")
    return tp, dp


def refuse_owned_flags(server_args: list[str]) -> list[str]:
    """--server-args as given, unless it sets a flag hpcai sets (or an
    abbreviation argparse would take for one)."""
    for arg in server_args:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("--") or len(flag) < 4:
            continue
        owned = [name for name in OWNED_SERVER_FLAGS if name == flag or name.startswith(flag)]
        if owned:
            raise UsageError(f"--server-args sets {flag}, which hpcai sets itself",
                             f"use hpcai's {OWNED_SERVER_FLAGS[owned[0]]} instead")
    return server_args


def loopback_env(env: dict) -> dict:
    """env with 127.0.0.1 and localhost in no_proxy and NO_PROXY."""
    out = dict(env)
    for name in ("no_proxy", "NO_PROXY"):
        have = [h.strip() for h in out.get(name, "").split(",") if h.strip()]
        out[name] = ",".join(have + [h for h in LOOPBACK if h not in have])
    return out


def parse_bench_result(path: Path) -> dict:
    """The last JSON line SGLang's client appended to its output file."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        raise WorkloadError(f"SGLang's benchmark client wrote no result to {path}",
                            f"see its log: {path.parent / CLIENT_LOG}") from None


def latency_stats(bench: dict) -> dict:
    """mean/median/p99 (and std, p90, p95 where given) per latency, in ms."""
    stats = {}
    for name, key in LATENCIES.items():
        entry = {q: bench.get(f"{q}_{key}_ms") for q in ("mean", "median", "p99")}
        for extra in ("std", "p90", "p95"):
            if f"{extra}_{key}_ms" in bench:
                entry[extra] = bench[f"{extra}_{key}_ms"]
        stats[name] = entry
    return stats


class SglangServe(EngineWorkload):
    unit = "tokens"
    # In-run sweeps (workloads/inrun.py; declared in_run="waves"): run(program=...)
    # serves the program's epochs against one server: warm-up and settle epochs
    # are hpcai's own waves, each measured window one run of the benchmark client.

    def __init__(self, spec: dict, ctx):
        p, devices = LlmServeParams.from_spec(spec), spec["devices"]
        self.spec, self.ctx = spec, ctx
        self.out_dir = Path(spec["output_dir"])
        # Where the benchmark client's files go: the run folder, or in an in-run
        # sweep the folder of the segment being measured (set by the entrypoint).
        self.wave_dir = self.out_dir
        if p.batch_size == "auto":
            raise UsageError("--batch-size auto has no meaning for serving",
                             "give the number of requests in flight, e.g. --batch-size 64")
        # "unlimited": no --max-concurrency, every request in flight at once.
        self.concurrency = None if p.batch_size == "unlimited" else int(p.batch_size)
        self.range_ratio = float(p.length_range_ratio)
        if not 0.0 <= self.range_ratio <= 1.0:
            raise UsageError("--length-range-ratio must be between 0 and 1",
                             f"got {self.range_ratio:g} (1: fixed lengths)")
        self.warmup_requests = int(p.warmup_requests or self.concurrency or 64)
        self.ramp = concurrency_ramp.parse(p.concurrency_ramp)
        self.ramp_result: dict | None = None  # the probes and the concurrency kept
        self.input_len, self.output_len = int(p.input_len), int(p.output_len)
        if self.input_len < 1 or self.output_len < 1:
            raise UsageError("--input-len and --output-len must be at least 1",
                             f"got {self.input_len} and {self.output_len}")
        rate = p.request_rate
        self.request_rate = float(rate) if rate not in (None, "inf") else float("inf")
        if not self.request_rate > 0:
            raise UsageError("--request-rate must be positive", f"got {rate}")
        self.ramp_skipped = concurrency_ramp.skipped_because(
            self.ramp, spec.get("overridden") or (), self.request_rate)
        self.server_timeout_s = float(p.server_timeout_s)
        self.stop_grace_s = float(p.server_stop_grace_s)
        if not 0 < self.stop_grace_s <= MAX_SERVER_STOP_GRACE_S:
            raise UsageError(f"server_stop_grace_s {self.stop_grace_s:g} is not in (0, {MAX_SERVER_STOP_GRACE_S:g}] s",
                             "keep the server's stop under the launcher's 30 s grace")
        self.seed = int(spec.get("seed", 0))
        gpu_indices = devices.get("gpu_indices") or []
        self.gpus = len(gpu_indices) if devices.get("type") == "cuda" and gpu_indices else 1
        self.tp, self.dp = parallel_sizes(p.tp, p.dp, self.gpus)
        self.server_args = refuse_owned_flags(shlex.split(p.server_args or ""))
        self._choose_model(p)
        self.host, self.port = "127.0.0.1", int(p.port or 0)
        self.server: proc.GroupProcess | None = None
        self.client: proc.GroupProcess | None = None
        self.model_info: dict | None = None
        self.bench: dict | None = None
        self.requests: list | None = None  # the measured wave's, wall-clock send times
        self.window: dict | None = None
        self.steady: dict | None = None
        self.warmup_failures: list[str] = []

    def _choose_model(self, p) -> None:
        """Real weights from --weights, else a built-in configuration served with
        dummy weights; either way the prompt must fit the model's context."""
        if p.weights:
            self.model_dir = llm_assets.resolve_site_path(
                p.weights, llm_assets.MODELS_DIR_ENV, "model folder", "--weights")
            if not (self.model_dir / "config.json").is_file():
                raise UsageError(f"{self.model_dir} holds no config.json",
                                 "point --weights at a Hugging Face model folder")
            self.model_cfg, self.dummy = None, False
            self.vocab_size = json.loads((self.model_dir / "config.json").read_text())["vocab_size"]
        else:
            name = p.model
            if name not in llm_assets.SERVE_MODELS:
                raise UsageError(f"no built-in configuration for model {name!r}",
                                 f"choose one of: {', '.join(llm_assets.SERVE_MODELS)}, "
                                 "or serve real weights with --weights DIR")
            self.model_cfg, self.dummy = llm_assets.SERVE_MODELS[name], True
            self.model_dir = self.out_dir / MODEL_DIR
            self.vocab_size = self.model_cfg["vocab_size"]
        limit = self.model_cfg["block_size"] if self.model_cfg else None
        if limit is not None and self.input_len + self.output_len > limit:
            raise UsageError(f"{self.input_len} + {self.output_len} tokens exceed the model's "
                             f"context of {limit}", "shorten --input-len or --output-len")

    # ---- commands -------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def server_command(self) -> list[str]:
        command = [sys.executable, "-m", "sglang.launch_server",
                   "--model-path", str(self.model_dir), "--host", self.host,
                   "--port", str(self.port), "--tp-size", str(self.tp),
                   "--dp-size", str(self.dp), "--random-seed", str(self.seed)]
        if self.dummy:
            command += ["--load-format", "dummy"]
        return command + self.server_args

    def client_command(self, num_prompts: int, concurrency: int | None = None,
                       folder: Path | None = None) -> list[str]:
        """The client's command: `num_prompts` requests, at most `concurrency` (default
        --batch-size) in flight, its files in `folder` (default the wave's folder)."""
        concurrency = concurrency or self.concurrency
        folder = folder or self.wave_dir
        rate = "inf" if self.request_rate == float("inf") else f"{self.request_rate:g}"
        # With real weights the client would decode its random ids to text (and drop
        # a BOS), which the server re-encodes: send the ids themselves instead.
        exact = [] if self.dummy else ["--tokenize-prompt"]
        return [sys.executable, "-m", CLIENT_WRAPPER, str(folder / CLIENT_REQUESTS),
                "--backend", "sglang",
                "--host", self.host, "--port", str(self.port),
                "--model", str(self.model_dir), "--tokenizer", str(self.model_dir),
                "--dataset-name", "random-ids", "--num-prompts", str(num_prompts),
                "--random-input-len", str(self.input_len),
                "--random-output-len", str(self.output_len),
                "--random-range-ratio", f"{self.range_ratio:.1f}" if self.range_ratio in (0, 1)
                else f"{self.range_ratio:g}",
                "--request-rate", rate,
                *(["--max-concurrency", str(concurrency)] if concurrency else []),
                "--seed", str(self.seed), "--warmup-requests", "0",  # hpcai warmed up
                "--output-file", str(folder / CLIENT_RESULT), "--disable-tqdm", *exact]

    # ---- the run --------------------------------------------------------
    def run(self, protocol: dict, progress, on_epoch=None, program=None) -> None:
        """The protocol (warm-up waves, one measured load), or with `program`
        (an in-run sweep) the program's epochs, all against one server."""
        if int(protocol["epochs"]) != 1:
            raise UsageError("serving measures one continuous load per run (--epochs 1)",
                             "lengthen it with --steps-per-epoch (requests)")
        total = int(protocol["warmup_epochs"]) + 1
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.dummy:
            llm_assets.write_dummy_model(self.model_dir, self.model_cfg)
        if not self.port:
            self.port = free_port(self.host)
        env = loopback_env({**os.environ, "PYTHONUNBUFFERED": "1"})
        env.pop("SGLANG_IS_IN_CI", None)  # it would flush the cache inside the client's 1 s sleep
        server_env = {**env, "SGL_FORCE_SHUTDOWN": "1"}  # SIGTERM: no unbounded drain
        self.server = proc.GroupProcess("SGLang server", self.server_command(),
                                        self.out_dir / SERVER_LOG, server_env, self.stop_grace_s)
        try:
            self.server.start()
            self.model_info = proc.wait_until_ready(
                self.server, f"{self.base_url}{READY_PATH}", self.server_timeout_s,
                "the SGLang server", None if self.ctx.device_type == "cuda"
                else "SGLang serves only on GPUs, and this run is on the CPU")
            if program is not None:
                if self.ramp_skipped is None:
                    self.ramp_skipped = "in-run sweep: every segment keeps --batch-size's concurrency"
                self._serve_program(program, protocol, progress, on_epoch, env)
                return
            for index in range(int(protocol["warmup_epochs"])):
                epoch = self._warmup_epoch(index)
                progress.epochs.append(epoch)
                if on_epoch is not None:
                    on_epoch(epoch, total)
            if self.ramp_skipped is None:  # after the warm-up: the probes find a warm server
                self._ramp_concurrency(env)
            epoch = self._measured_epoch(len(progress.epochs), int(protocol["steps_per_epoch"]), env)
            progress.epochs.append(epoch)
            if on_epoch is not None:
                on_epoch(epoch, total)
            self._let_sampler_pass(epoch, protocol)
        finally:
            try:
                if self.client is not None:
                    self.client.stop()
            finally:
                self.server.stop()

    @staticmethod
    def _let_sampler_pass(epoch: Epoch, protocol: dict) -> None:
        """The energy counter is read at the window's end from the samples
        around it: let the sampler tick past the end before going on."""
        time.sleep(max(0.0, epoch.end + 2 * float(protocol["sample_interval_s"]) - time.time()))

    def _serve_program(self, program, protocol: dict, progress, on_epoch, env: dict) -> None:
        """An in-run sweep's epochs (workloads/inrun.py): a warm-up or settle epoch
        of n requests is one of hpcai's waves, at most --batch-size in flight and
        never fewer requests than that (the server stays fully loaded while it
        settles); a measured epoch is one run of the benchmark client, n requests."""
        try:
            request = next(program)
            while True:
                steps, warmup = request
                index = len(progress.epochs)
                if warmup:
                    epoch = self._warmup_epoch(index, max(int(steps), self.warmup_requests))
                else:
                    epoch = self._measured_epoch(index, int(steps), env)
                    self._let_sampler_pass(epoch, protocol)
                progress.epochs.append(epoch)
                if on_epoch is not None:
                    on_epoch(epoch, index + 1)
                request = program.send(epoch)
        except StopIteration:
            return

    def _generate(self, prompt_ids: list[int]) -> int:
        payload = {"input_ids": prompt_ids,
                   "sampling_params": {"max_new_tokens": self.output_len, "temperature": 0.0,
                                       "ignore_eos": True}}
        answer = proc.post_json(f"{self.base_url}/generate", payload, self.server_timeout_s)
        return int(answer["meta_info"]["completion_tokens"])

    def _warmup_epoch(self, index: int, requests: int | None = None) -> Epoch:
        """One wave of requests at the measured lengths: warmup_requests of them
        sent all at once, or `requests` with at most warmup_requests in flight."""
        requests = requests or self.warmup_requests
        rng = random.Random(self.seed * 7919 + index)
        prompts = [[rng.randrange(self.vocab_size) for _ in range(self.input_len)]
                   for _ in range(requests)]
        pool = ThreadPoolExecutor(max_workers=min(requests, self.warmup_requests),
                                  thread_name_prefix="warmup")
        start_wall, start = time.time(), time.perf_counter()
        try:
            futures = [pool.submit(self._generate, p) for p in prompts]
            tokens, errors = 0, []
            for future in futures:
                try:
                    tokens += future.result()
                except Exception as exc:  # any failure: the server is not serving
                    errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        duration, end_wall = time.perf_counter() - start, time.time()
        if errors:
            self.warmup_failures = errors
            raise WorkloadError(f"{len(errors)} of {len(prompts)} warm-up requests failed "
                                f"({errors[0]})", f"see the server log: {self.server.log_path}")
        return Epoch(index, True, len(prompts), tokens, start_wall, end_wall, duration, None)

    def _ramp_concurrency(self, env: dict) -> None:
        """One short wave of the client per probed concurrency (as many requests as in
        flight, files in concurrency-ramp/cN/); the measured load runs at the smallest
        within 3% of the best output tokens/s (workloads/concurrency_ramp.py)."""
        probes = []
        for concurrency in self.ramp:
            folder = self.out_dir / "concurrency-ramp" / f"c{concurrency}"
            folder.mkdir(parents=True, exist_ok=True)
            bench, _ = self._run_client(concurrency, env, concurrency, folder, "probe")
            probes.append(concurrency_ramp.probe_figures(
                concurrency, bench, os.path.relpath(folder, self.out_dir)))
        self.concurrency = concurrency_ramp.choose(probes)
        self.ramp_result = concurrency_ramp.record(probes, self.concurrency)
        figures = ", ".join(f"{p['concurrency']}: {p['output_tokens_per_s']:.0f}" for p in probes)
        print(f"[hpcai] concurrency ramp (in flight: output tok/s) {figures}; measuring at "
              f"{self.concurrency} in flight", file=sys.stderr, flush=True)

    def _run_client(self, num_prompts: int, env: dict, concurrency: int | None, folder: Path,
                    what: str) -> tuple[dict, float]:
        """One run of SGLang's benchmark client: its parsed result and the wall time it exited."""
        result_file = folder / CLIENT_RESULT
        result_file.unlink(missing_ok=True)
        (folder / CLIENT_REQUESTS).unlink(missing_ok=True)
        self.client = proc.GroupProcess("SGLang benchmark client",
                                        self.client_command(num_prompts, concurrency, folder),
                                        folder / CLIENT_LOG, env, stop_grace_s=5)
        self.client.start(watch=(START_LINE, BANNER))
        code = self.client.wait()
        exit_wall = time.time()
        if code != 0:
            raise WorkloadError(f"SGLang's benchmark client exited with code {code}",
                                f"see its log: {self.client.log_path}")
        bench = parse_bench_result(result_file)
        if int(bench.get("completed", 0)) == 0:
            raise WorkloadError(f"none of the {num_prompts} {what} requests succeeded",
                                f"see the server log: {self.server.log_path}")
        return bench, exit_wall

    def _measured_epoch(self, index: int, num_prompts: int, env: dict) -> Epoch:
        self.bench = self.window = self.steady = None  # this wave's, once parsed
        self.requests = None
        bench, exit_wall = self._run_client(num_prompts, env, self.concurrency, self.wave_dir, "measured")
        self.bench = bench
        completed = int(bench.get("completed", 0))
        if completed < num_prompts:
            print(f"[hpcai] warning: {num_prompts - completed} of {num_prompts} measured requests "
                  f"failed; see the server log: {self.server.log_path}", file=sys.stderr, flush=True)
        duration = float(bench["duration"])
        started, banner = self.client.first_time(START_LINE), self.client.first_time(BANNER)
        if started is not None:
            start = started + CLIENT_START_SLEEP_S
            end, source = start + duration, "client start line + 1.0 s"
        else:
            end = banner if banner is not None else exit_wall
            start, source = end - duration, ("client result banner" if banner is not None
                                             else "client exit (no banner seen)")
        self.window = {"start": start, "end": end, "client_duration_s": duration, "source": source}
        self.steady = self._steady_state(num_prompts)
        if self.steady["measured"]:
            # The measured epoch is the steady state: its tokens over its time.
            ss = self.steady
            return Epoch(index, False, ss["completed_in_window"], round(ss["output_tokens"]),
                         ss["start"], ss["end"], ss["duration_s"], None)
        return Epoch(index, False, num_prompts, int(bench["total_output_tokens"]),
                     start, end, duration, None)

    def _steady_state(self, num_prompts: int) -> dict:
        """The steady state from the client's per-request timestamps (hpcai/measure/steady_state.py),
        in wall seconds; else why not, and the measured epoch stays the whole load."""
        target = min(self.concurrency or num_prompts, num_prompts)
        try:
            recorded = json.loads((self.wave_dir / CLIENT_REQUESTS).read_text())
            offset = float(recorded["wall_minus_perf_s"])
            requests = [{**r, "start": r["start"] + offset} for r in recorded["requests"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return {"available": False, "measured": False, "target_concurrency": target,
                    "reason": f"no per-request timestamps from the client ({type(exc).__name__}: {exc})",
                    "basis": "the client's whole load"}
        self.requests = requests  # wall-clock send times: the prefill/decode split reads them
        found = steady_state.analyse(requests, target)
        found["requests_file"] = CLIENT_REQUESTS
        # One burst (no --max-concurrency: the seed paper's protocol) has no steady state
        # worth the name: it ends at the first completion, which with output lengths from
        # 0 comes at once. The headline stays the whole load, as the paper measured it;
        # the window and the phases are recorded beside it.
        found["measured"] = bool(found["available"] and self.concurrency is not None)
        if found["measured"]:
            found["basis"] = ("steady state: requests in flight at the target concurrency until "
                              "the first completion after the last request was sent")
        elif found["available"]:
            found["basis"] = ("the client's whole load: every request sent at once (no "
                              "--max-concurrency, the seed paper's protocol); the steady state "
                              "is recorded beside it, not measured")
        else:
            found["basis"] = "the client's whole load"
        return found

    def serving_requests(self) -> dict | None:
        """This wave's requests (wall-clock send time, ttft, latency) and its token
        counts, for the prefill/decode split (hpcai/measure/serving_phases.py)."""
        requests, bench = self.requests, self.bench
        if not requests or bench is None:
            return None
        return {"requests": requests, "input_tokens": bench.get("total_input_tokens"),
                "output_tokens": bench.get("total_output_tokens")}

    def phases(self) -> dict | None:
        """Ramp-up, steady state and ramp-down (wall seconds), for their energies."""
        return (self.steady or {}).get("phases")

    # ---- what the result records ---------------------------------------------
    def describe(self) -> dict:
        return {
            "task": "inference",
            "engine": f"SGLang server (sglang.launch_server) + SGLang's benchmark client ({CLIENT_MODULE})",
            "model": self.model_cfg["name"] if self.model_cfg else str(self.model_dir),
            "weights": "dummy (random, --load-format dummy)" if self.dummy else str(self.model_dir),
            "model_dir": str(self.model_dir),
            "model_config": self.model_cfg,
            "gpus": self.gpus, "tp": self.tp, "dp": self.dp,
            "devices_per_process": self.gpus,  # the server drives them all: per GPU divides by it
            "batch_size_per_process": self.concurrency or "unlimited",
            "max_concurrency": self.concurrency or "unlimited",
            "warmup_requests": self.warmup_requests,
            "concurrency_ramp": self.ramp_result or (
                {"skipped": self.ramp_skipped} if self.ramp else None),
            "length_range_ratio": self.range_ratio,
            "request_rate": None if self.request_rate == float("inf") else self.request_rate,
            "input_len": self.input_len, "output_len": self.output_len,
            "dataset": ("random-ids, fixed lengths (--random-range-ratio 1.0)"
                        if self.range_ratio == 1 else
                        f"random-ids, lengths uniform from {self.range_ratio:g} x up to "
                        f"{self.input_len} in / {self.output_len} out "
                        f"(--random-range-ratio {self.range_ratio:g})"),
            "throughput_counts": "output tokens",
            "server_command": self.server_command(),
            "server_timeout_s": self.server_timeout_s,
            "server_stop_grace_s": self.stop_grace_s,
        }

    def metrics(self) -> dict | None:
        # Paths relative to the result's folder: an in-run segment's server log is
        # the one server's, in the process folder.
        doc = {"server_log": os.path.relpath(self.out_dir / SERVER_LOG, self.wave_dir),
               "client_log": CLIENT_LOG, "server_model_info": self.model_info}
        if self.warmup_failures:
            doc["warmup_failures"] = self.warmup_failures[:5]
        bench = self.bench
        if bench is None:
            return doc
        sent = int(self.spec["protocol"]["steps_per_epoch"])
        completed = int(bench["completed"])
        output, total = bench.get("output_throughput"), bench.get("total_throughput")
        doc.update({
            "client_result": CLIENT_RESULT,
            "window": self.window,
            "output_tokens_per_s": output,
            "total_tokens_per_s": total,
            "input_tokens_per_s": bench.get("input_throughput"),
            "requests_per_s": bench.get("request_throughput"),
            "output_tokens_per_s_per_gpu": output / self.gpus if output is not None else None,
            "total_tokens_per_s_per_gpu": total / self.gpus if total is not None else None,
            "latency_ms": latency_stats(bench),
            "requests": {"sent": sent, "completed": completed, "failed": max(0, sent - completed)},
            "tokens": {"input": bench.get("total_input_tokens"),
                       "output": bench.get("total_output_tokens")},
            # With ignore_eos every completed request returns output_len tokens.
            "lengths_fixed": (bench.get("total_output_tokens") == completed * self.output_len
                              and bench.get("total_input_tokens") == completed * self.input_len),
            "achieved_concurrency": bench.get("concurrency"),
            "steady_state": self.steady,
        })
        return doc


def build(spec: dict, ctx) -> SglangServe:
    return SglangServe(spec, ctx)
