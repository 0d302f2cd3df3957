"""SGLang 0.5.19's REAL benchmark client against the STAND-IN server
(tests/standins/sglang), with hpcai's own client command line and model folder.

The serving tests drive the stand-in client; this one checks that the
stand-ins answer what the real client asks and write what it writes, and
loads hpcai's generated tokenizer with the transformers SGLang 0.5.19 pins
(5.12.1; CI's own is 5.3.0).

The real client runs from SGLang's own wheel (sglang-0.5.19, downloaded once,
26 MB, not installed): its `sglang/benchmark/` package, `bench_serving.py` and
`srt/utils/network.py`, unchanged. The rest of the package cannot be imported
without a GPU stack (`sglang/__init__.py` and `srt/utils/__init__.py` import
torch and FlashInfer, `srt/disaggregation/utils.py` torch), so the package's
`__init__` files are empty here and `srt/disaggregation/utils.py` holds the
one constant the client takes from it (FAKE_BOOTSTRAP_HOST, its line 48).
The client's dependencies (transformers 5.12.1, aiohttp, datasets, ...) live
in a venv of their own, made once and kept (HPCAI_TEST_SGLANG_CLIENT, default
~/.cache/hpcai-tests/sglang-client-0.5.19).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from hpcai.measure import steady_state
from hpcai.workloads import distributed, llm_assets
from hpcai.workloads import llm_serve as S
from hpcai.workloads.catalog import LLAMA3_8B_INFERENCE

# make test runs a module on one pytest-xdist worker (--dist loadfile): its session
# fixture builds one venv in a shared cache folder.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "tests" / "standins"
SGLANG = "sglang==0.5.19"
# The client's imports (benchmark/serving.py, utils.py, datasets/*.py, srt/utils/network.py),
# at SGLang 0.5.19's own pins where it has them (its Requires-Dist).
CLIENT_DEPS = ["transformers==5.12.1", "tokenizers==0.22.2", "numpy", "aiohttp", "orjson", "requests",
               "tqdm", "pybase64", "pillow", "datasets", "pyzmq", "psutil"]
REAL_FILES = ("sglang/benchmark/", "sglang/bench_serving.py", "sglang/srt/utils/network.py")


def cache_dir() -> Path:
    return Path(os.environ.get("HPCAI_TEST_SGLANG_CLIENT")
                or Path.home() / ".cache" / "hpcai-tests" / "sglang-client-0.5.19")


@pytest.fixture(scope="session")
def real_client() -> tuple[Path, Path]:
    """(python of the client's venv, folder to put on its PYTHONPATH)."""
    root = cache_dir()
    python, tree = root / "venv" / "bin" / "python", root / "tree"
    venv_done, tree_done = root / "venv-ready", root / "tree-ready"
    deps = "\n".join(CLIENT_DEPS)
    if not venv_done.is_file() or venv_done.read_text() != deps:
        shutil.rmtree(root / "venv", ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys._base_executable, "-m", "venv", str(root / "venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *CLIENT_DEPS], check=True,
                       timeout=900)
        venv_done.write_text(deps)
    if not tree_done.is_file() or tree_done.read_text() != SGLANG:
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run([str(python), "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "-d", str(root / "wheel"), SGLANG], check=True, timeout=600)
        wheel = next((root / "wheel").glob("sglang-0.5.19-*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            for name in whl.namelist():
                if name.startswith(REAL_FILES) and not name.endswith("/"):
                    whl.extract(name, tree)
        for package in ("sglang", "sglang/srt", "sglang/srt/utils", "sglang/srt/disaggregation"):
            (tree / package).mkdir(parents=True, exist_ok=True)
            (tree / package / "__init__.py").write_text("# empty: the real one imports torch (see the test)\n")
        (tree / "sglang" / "srt" / "disaggregation" / "utils.py").write_text(
            '# sglang-0.5.19 srt/disaggregation/utils.py:48 (the rest needs torch)\nFAKE_BOOTSTRAP_HOST = "2.2.2.2"\n')
        tree_done.write_text(SGLANG)
    return python, tree


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def standin_server(tmp_path):
    """The stand-in server on hpcai's generated tiny model folder."""
    model = llm_assets.write_dummy_model(tmp_path / "model", llm_assets.TINY_LLAMA)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(STANDINS), "HPCAI_SGLANG_STANDIN_TOKEN_S": "0.001"}
    log = open(tmp_path / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
                               "--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy"],
                              stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/model_info", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.2)
        yield model, port
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


def client_command(tmp_path, model: Path, port: int, weights: bool) -> tuple[list[str], Path]:
    """hpcai's own client command (SglangServe.client_command), for 12 requests."""
    params = {**LLAMA3_8B_INFERENCE.presets["tiny"].params, "batch_size": 4}
    if weights:
        params["weights"] = str(model)
    spec = {"params": params, "protocol": dict(LLAMA3_8B_INFERENCE.presets["tiny"].protocol),
            "devices": {"type": "cpu", "gpu_indices": None}, "output_dir": str(tmp_path / "run"), "seed": 3}
    workload = S.build(spec, distributed.Context(0, 1, 0, 1, "cpu", None, None, 2, "host"))
    workload.model_dir, workload.port = model, port
    (tmp_path / "run").mkdir(exist_ok=True)
    command = workload.client_command(12)[1:]
    # hpcai runs SGLang's client through its wrapper module; it imports nothing of hpcai,
    # so the client's own venv runs it by path.
    assert command[:3] == ["-m", S.CLIENT_WRAPPER, str(tmp_path / "run" / S.CLIENT_REQUESTS)]
    return [str(ROOT / "workloads" / "sglang_client.py"), *command[2:]], tmp_path / "run" / S.CLIENT_RESULT


def run_client(python: Path, path: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(path), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("SGLANG_IS_IN_CI", None)
    return subprocess.run([str(python), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("weights", [False, True], ids=["dummy", "weights-tokenize-prompt"])
def test_the_real_client_runs_against_the_stand_in_and_writes_what_the_stand_in_writes(
        real_client, standin_server, tmp_path, weights):
    python, tree = real_client
    model, port = standin_server
    args, result_file = client_command(tmp_path, model, port, weights)
    assert ("--tokenize-prompt" in args) == weights
    requests_file = result_file.with_name(S.CLIENT_REQUESTS)

    real = run_client(python, tree, args + ["--output-details"])
    log = real.stdout + real.stderr
    assert real.returncode == 0, log[-4000:]
    assert S.START_LINE in log and S.BANNER in log  # the window's anchors
    # hpcai's config.json carries transformers_version: 5.12.1 does not call it a Mistral folder.
    assert "incorrect regex pattern" not in log
    real_doc = S.parse_bench_result(result_file)
    real_requests = json.loads(requests_file.read_text())
    result_file.unlink()
    requests_file.unlink()

    standin = run_client(Path(sys.executable), STANDINS, args + ["--output-details"])
    assert standin.returncode == 0, standin.stdout + standin.stderr
    standin_doc = S.parse_bench_result(result_file)
    standin_requests = json.loads(requests_file.read_text())

    # Per request, in the client's order: the send time and latency SGLang's client measured
    # (RequestFuncOutput.start_time/latency), its ttft and itl the same as its --output-details.
    for doc, recorded in ((real_doc, real_requests), (standin_doc, standin_requests)):
        reqs = recorded["requests"]
        assert len(reqs) == 12 and all(r["success"] and r["latency"] > r["ttft"] > 0 for r in reqs)
        assert [r["ttft"] for r in reqs] == doc["ttfts"] and [r["itl"] for r in reqs] == doc["itls"]
        assert [r["output_len"] for r in reqs] == doc["output_lens"]
        wall = [{**r, "start": r["start"] + recorded["wall_minus_perf_s"]} for r in reqs]
        assert abs(wall[0]["start"] - time.time()) < 300  # perf_counter turned into wall time
        found = steady_state.analyse(wall, 4)  # --max-concurrency 4
        assert found["peak_in_flight"] == 4 and found["available"], found

    assert real_doc.keys() == standin_doc.keys(), (real_doc.keys() ^ standin_doc.keys())
    for doc in (real_doc, standin_doc):
        input_len = LLAMA3_8B_INFERENCE.presets["tiny"].params["input_len"]
        output_len = LLAMA3_8B_INFERENCE.presets["tiny"].params["output_len"]
        assert doc["completed"] == 12 and doc["total_input_tokens"] == 12 * input_len
        assert doc["total_output_tokens"] == 12 * output_len
        assert doc["output_lens"] == [output_len] * 12 and len(doc["itls"]) == 12
        # Inter-token latency per token: up to output_len - 1 gaps after the first text
        # (a first token that decodes to nothing, a special one, starts nothing).
        assert all(len(gaps) <= output_len - 1 for gaps in doc["itls"])
        assert sum(map(len, doc["itls"])) >= 0.8 * 12 * (output_len - 1)
        assert doc["server_info"] is not None and doc["max_concurrency"] == 4
        stats = S.latency_stats(doc)
        assert all({"mean", "median", "std", "p90", "p95", "p99"} <= stats[k].keys() for k in stats)
