"""STAND-IN for `python -m sglang.launch_server` (see this package's docstring).

It checks the model folder as SGLang would need it (config.json, a tokenizer
whose vocabulary fits the model's), starts a child process as SGLang starts
its scheduler (so the tests see a process group being stopped), and answers
the endpoints hpcai and SGLang's benchmark client use with random tokens.
Endpoints as in SGLang 0.5.19's sglang/srt/entrypoints/http_server.py:
/model_info (:753), /get_model_info (:743, a deprecated alias that logs a
warning on each call), /server_info (:811), /v1/models (:1855), /health and
/generate.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from sglang import failure_modes

# Pretend decode time per token; tests lengthen it for a longer load.
TOKEN_S = float(os.environ.get("HPCAI_SGLANG_STANDIN_TOKEN_S", "0.002"))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="sglang.launch_server (stand-in)")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--dp-size", type=int, default=1)
    parser.add_argument("--random-seed", type=int, default=0)
    parser.add_argument("--load-format", default="auto", choices=["auto", "dummy", "safetensors"])
    parser.add_argument("--mem-fraction-static", type=float)
    return parser.parse_args(argv)


class Model:
    def __init__(self, path: Path, seed: int, server_args: dict):
        from tokenizers import Tokenizer

        self.path = path
        self.server_args = server_args
        self.load_format = server_args.get("load_format")
        self.config = json.loads((path / "config.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        if self.tokenizer.get_vocab_size() > self.config["vocab_size"]:
            raise SystemExit("tokenizer larger than the model's vocabulary")
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.streams = 0

    def next_ids(self, n: int) -> list:
        with self.lock:
            return [self.rng.randrange(self.config["vocab_size"]) for _ in range(n)]


def make_handler(model: Model, modes: set):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the log is for what matters
            pass

        def _json(self, code: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path in ("/model_info", "/get_model_info"):
                if self.path == "/get_model_info":  # http_server.py:743-750
                    print("WARNING Endpoint '/get_model_info' is deprecated and will be removed in a "
                          "future version. Please use '/model_info' instead.", flush=True)
                self._json(200, {"model_path": str(model.path), "served_model_name": str(model.path),
                                 "tokenizer_path": str(model.path), "is_generation": True,
                                 "load_format": model.load_format, "model_type": model.config.get("model_type"),
                                 "architectures": model.config.get("architectures"), "standin": True})
            elif self.path == "/v1/models":  # http_server.py:1855-1868, ModelCard (openai/protocol.py:77)
                self._json(200, {"object": "list", "data": [{
                    "id": str(model.path), "object": "model", "owned_by": "sglang", "root": str(model.path),
                    "max_model_len": model.config.get("max_position_embeddings")}]})
            elif self.path == "/server_info":  # http_server.py:811-840: the resolved server args, and more
                self._json(200, {**model.server_args, "internal_states": [{}], "version": "0.5.19",
                                 "standin": True})
            elif self.path == "/health":
                self._json(200, {})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self):
            if self.path != "/generate":
                self._json(404, {"error": "not found"})
                return
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            params = request.get("sampling_params", {})
            n_out = int(params.get("max_new_tokens", 16))
            if "input_ids" in request:
                prompt_tokens = len(request["input_ids"])
            else:
                prompt_tokens = len(model.tokenizer.encode(request["text"]).ids)
            stream = bool(request.get("stream"))
            if stream:
                with model.lock:
                    model.streams += 1
                    number = model.streams
                if "fail-all-streams" in modes or ("fail-some-streams" in modes and number % 2 == 0):
                    self._json(500, {"error": "stand-in failure"})
                    return
            elif "fail-warmup" in modes:
                self._json(500, {"error": "stand-in failure"})
                return
            start = time.time()
            ids = model.next_ids(n_out)
            meta = {"prompt_tokens": prompt_tokens, "completion_tokens": 0, "id": "standin"}
            if not stream:
                time.sleep(TOKEN_S * n_out)
                meta["completion_tokens"] = n_out
                self._json(200, {"text": model.tokenizer.decode(ids), "output_ids": ids,
                                 "meta_info": meta})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(1, n_out + 1):
                time.sleep(TOKEN_S)
                meta["completion_tokens"] = i
                chunk = {"text": model.tokenizer.decode(ids[:i]), "output_ids": ids[:i],
                         "meta_info": meta}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True
            # What the tests compare hpcai's measured window with.
            print(f"standin stream start={start:.6f} end={time.time():.6f}", flush=True)

    return Handler


def main(argv=None) -> int:
    args = parse_args(argv)
    modes = failure_modes()
    print(f"stand-in sglang.launch_server {' '.join(sys.argv[1:])}", flush=True)
    if "hang-on-shutdown" in modes:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the child inherits it too
    # SGLang runs its scheduler in child processes of the same group.
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    print(f"standin pids leader={os.getpid()} child={child.pid}", flush=True)
    if "crash-at-start" in modes:
        # As when a scheduler fails: the leader exits, its child is left behind.
        print("stand-in: crashing at start, as asked", flush=True)
        return 3
    if "never-ready" in modes:
        while True:
            time.sleep(1)
    model = Model(Path(args.model_path), args.random_seed, vars(args))
    # SGLang serves through uvicorn, whose listen backlog is 2048 (uvicorn's Config
    # backlog default); http.server's is 5, which would reset a burst of requests.
    ThreadingHTTPServer.request_queue_size = 2048
    server = ThreadingHTTPServer((args.host, args.port), make_handler(model, modes))
    server.daemon_threads = True
    print("The server is fired up and ready to roll!", flush=True)
    try:
        server.serve_forever()
    finally:
        child.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
