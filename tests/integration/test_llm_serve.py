"""`hpcai-launch llama3-8b-inference` end to end, against the STAND-IN for
SGLang in tests/standins (SGLang cannot serve on CPU machines). The
orchestration is hpcai's real code path: it starts `python -m
sglang.launch_server`, waits for it, warms it up, runs `python -m
sglang.bench_serving`, parses its result and stops the server; only what
answers is the stand-in. GPU power readings come from the FAKE pynvml.
"""
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, assert_valid_result, pid_alive as alive

pytestmark = pytest.mark.slow
STANDINS = ROOT / "tests" / "standins"
TINY = ["llama3-8b-inference", "--preset", "tiny"]


def with_standin(node, *modes, **env):
    node.env["PYTHONPATH"] = os.pathsep.join([str(STANDINS), node.env["PYTHONPATH"]])
    node.env["HPCAI_SGLANG_STANDIN"] = ",".join(modes)
    node.env.update(env)
    return node


def run_dir(node) -> Path:
    dirs = [p for p in node.results.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def server_pids(folder: Path) -> list[int]:
    match = re.search(r"standin pids leader=(\d+) child=(\d+)", (folder / "sglang-server.log").read_text())
    assert match, (folder / "sglang-server.log").read_text()
    return [int(match[1]), int(match[2])]


def assert_server_gone(folder: Path) -> None:
    pids = server_pids(folder)
    assert not any(alive(p) for p in pids), f"stand-in server processes left: {pids}"


def test_serving_run_gives_a_valid_result_aligned_with_power(fake_nvidia_node, result_schema):
    """Two FAKE GPUs (--device cuda: the stand-in needs none), data parallel 2."""
    node = with_standin(fake_nvidia_node, HPCAI_SGLANG_STANDIN_TOKEN_S="0.01")
    done = node.launch(*TINY, "--device", "cuda", "--output-len", "32", "--steps-per-epoch", "24",
                       "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete" and doc["config"]["task"] == "inference"
    assert (doc["config"]["gpus"], doc["config"]["tp"], doc["config"]["dp"]) == (2, 1, 2)
    folder = run_dir(node)
    server_log = (folder / "sglang-server.log").read_text()
    assert "--dp-size 2" in server_log and "--load-format dummy" in server_log
    assert (folder / "model" / "config.json").is_file()  # written for the dummy weights
    m = doc["workload_metrics"]
    assert m["requests"] == {"sent": 24, "completed": 24, "failed": 0}
    assert m["tokens"] == {"input": 24 * 16, "output": 24 * 32} and m["lengths_fixed"]
    for name in ("ttft", "itl", "tpot", "e2e"):
        stats = m["latency_ms"][name]
        assert 0 < stats["median"] <= stats["p99"] and stats["mean"] > 0
    assert m["output_tokens_per_s_per_gpu"] == pytest.approx(m["output_tokens_per_s"] / 2)
    assert [e["warmup"] for e in doc["epochs"]] == [True, False]
    assert doc["epochs"][0]["units"] == 4 * 32  # one wave of warm-up requests
    # The whole load holds every measured request as the server saw it, and little else.
    streams = [(float(a), float(b)) for a, b in
               re.findall(r"standin stream start=([\d.]+) end=([\d.]+)", server_log)]
    assert len(streams) == 24
    first, last = min(s for s, _ in streams), max(e for _, e in streams)
    window = m["window"]
    # Anchored on the client's own start line: 1.0 s after it, SGLang's client starts its clock.
    # Both ends within 50 ms: on a loaded machine the client's 1 s sleep runs over, which
    # moves its real clock, and so the window's end, that much (CI saw 11 ms).
    assert window["source"] == "client start line + 1.0 s"
    assert window["start"] <= first + 0.05 and last <= window["end"] + 0.05
    assert (window["end"] - window["start"]) - (last - first) < 0.25
    # The steady state, from the client's per-request timestamps, as the server saw it:
    # from the 4th request in flight (--batch-size 4) until the first stream to end after
    # the last one started.
    ss = m["steady_state"]
    assert ss["available"] and ss["target_concurrency"] == 4 and ss["peak_in_flight"] == 4
    starts = sorted(a for a, _ in streams)
    assert ss["start"] == pytest.approx(starts[3], abs=0.1)
    assert ss["end"] == pytest.approx(min(b for _, b in streams if b >= starts[-1]), abs=0.1)
    assert (folder / ss["requests_file"]).is_file()
    # The result's throughput and energy are the steady state's.
    assert doc["throughput"]["node"] == pytest.approx(ss["output_tokens_per_s"])
    assert doc["throughput"]["per_gpu"] == pytest.approx(ss["output_tokens_per_s"] / 2)
    assert doc["work"]["measured_units"] == round(ss["output_tokens"]) < 24 * 32
    assert doc["timestamps"]["measured_start"] == ss["start"]
    # Energy from the FAKE GPUs' counters: their steady draw x window, per phase too.
    power = doc["power"]
    assert power["available"] and power["energy_source"] == "counter"
    draw_w = sum(g["power_w"]["mean"] for g in doc["gpus"])
    assert draw_w > 0 and power["window_s"] == pytest.approx(ss["duration_s"])
    assert power["energy_j"] == pytest.approx(draw_w * power["window_s"], rel=0.05)
    assert power["energy_per_unit_j"] == pytest.approx(power["energy_j"] / doc["work"]["measured_units"])
    phases = m["phase_energy"]
    assert phases["steady"]["energy_j"] == pytest.approx(power["energy_j"], rel=0.02)
    assert phases["ramp_up"]["end"] == phases["steady"]["start"] == ss["start"]
    assert phases["ramp_down"]["start"] == phases["steady"]["end"] == ss["end"]
    for name in ("ramp_up", "ramp_down"):
        p = phases[name]
        assert p["energy_j"] == pytest.approx(draw_w * p["duration_s"], rel=0.05, abs=1.0)
    assert doc["validity"]["evaluated_by"] == "launcher"
    assert "tokens/s (node)" in done.stdout
    assert_server_gone(folder)


def test_a_site_proxy_does_not_catch_loopback_traffic(cpu_node, result_schema):
    """http_proxy without no_proxy, pointing at a port nobody listens on: hpcai's
    readiness poll and warm-up, and the client's ready check and /server_info (the
    real one uses requests, which obeys http_proxy), must all go direct."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    node = with_standin(cpu_node, http_proxy=dead, HTTP_PROXY=dead)
    node.env.pop("no_proxy", None)
    node.env.pop("NO_PROXY", None)
    done = node.launch(*TINY, "--server-timeout", "20", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["workload_metrics"]["requests"]["completed"] == 8
    assert doc["workload_metrics"]["window"]["source"] == "client start line + 1.0 s"
    assert_server_gone(run_dir(node))


def test_failed_requests_are_counted(cpu_node, result_schema):
    node = with_standin(cpu_node, "fail-some-streams")
    done = node.launch(*TINY, "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["workload_metrics"]["requests"] == {"sent": 8, "completed": 4, "failed": 4}
    assert doc["workload_metrics"]["tokens"]["output"] == 4 * 8
    # Failed requests are never in flight for the steady state; the measured epoch
    # counts the tokens of the completed ones inside it (or, without one, all of them).
    ss = doc["workload_metrics"]["steady_state"]
    assert ss["requests"] == 8 and ss["completed"] == 4
    assert doc["work"]["measured_units"] == (round(ss["output_tokens"]) if ss["available"] else 4 * 8)
    assert "4 of 8 measured requests failed" in done.stderr
    assert_server_gone(run_dir(node))


def test_a_server_that_ignores_sigterm_is_killed(cpu_node, result_schema):
    node = with_standin(cpu_node, "hang-on-shutdown")
    done = node.launch(*TINY, "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    assert_valid_result(node.only_result(), result_schema)
    folder = run_dir(node)
    assert "SIGTERM: sending SIGKILL" in (folder / "sglang-server.log").read_text()
    assert_server_gone(folder)


@pytest.mark.parametrize("mode,args,message", [
    ("crash-at-start", [], "the SGLang server exited with code 3 before it was ready"),
    ("never-ready", ["--server-timeout", "2"], "was not ready after 2 s"),
    ("fail-warmup", [], "4 of 4 warm-up requests failed"),
    ("fail-all-streams", [], "none of the 8 measured requests succeeded"),
    ("client-crash", [], "SGLang's benchmark client exited with code 2"),
])
def test_each_failure_is_one_line_and_leaves_no_server(cpu_node, result_schema, mode, args, message):
    node = with_standin(cpu_node, mode)
    done = node.launch(*TINY, *args, "-o", str(node.results))
    assert done.returncode == 3, done.stderr
    error_line = [line for line in done.stderr.splitlines() if line.startswith("hpcai-launch: error")]
    assert len(error_line) == 1 and message in error_line[0], done.stderr
    folder = run_dir(node)
    log = "sglang-bench.log" if mode == "client-crash" else "sglang-server.log"
    assert str(folder / log) in error_line[0]  # points at the log, which is kept
    if mode == "crash-at-start":
        assert "SGLang serves only on GPUs, and this run is on the CPU" in error_line[0]
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "failed" and message in doc["error"]["message"]
    assert_server_gone(folder)


def test_sigterm_during_the_load_stops_client_and_server(cpu_node, result_schema):
    node = with_standin(cpu_node, HPCAI_SGLANG_STANDIN_TOKEN_S="0.05")
    proc = node.popen(*TINY, "--steps-per-epoch", "400", "-o", str(node.results))
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    deadline = time.time() + 60
    while True:
        assert proc.poll() is None, "".join(lines)
        assert time.time() < deadline, "".join(lines)
        logs = list(node.results.glob("*/sglang-bench.log"))
        if logs and "Starting main benchmark run" in logs[0].read_text():
            break
        time.sleep(0.1)
    client_pid = int(re.search(r"standin client pid=(\d+)", logs[0].read_text())[1])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + 15, "".join(lines)
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "interrupted"
    assert doc["protocol"]["epochs_completed"] == 1  # the warm-up
    assert not alive(client_pid)
    assert_server_gone(run_dir(node))


def test_without_sglang_the_run_stops_before_it_starts(cpu_node):
    done = cpu_node.launch(*TINY, "-o", str(cpu_node.results))  # no stand-in on the path
    assert done.returncode != 0
    assert "sglang is not installed" in done.stderr and "pip install '.[serve]'" in done.stderr
    assert not cpu_node.results.exists() or not any(cpu_node.results.iterdir())


@pytest.mark.parametrize("args,message", [
    (["--epochs", "2"], "serving measures one continuous load per run"),
    (["--tp", "2"], "--tp 2 x --dp ? does not use the run's 1 GPU(s)"),
])
def test_bad_options_are_one_line_errors(cpu_node, args, message):
    node = with_standin(cpu_node)
    done = node.launch(*TINY, *args, "-o", str(node.results))
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    doc = node.only_result()
    assert doc["status"] == "failed"
    assert not (run_dir(node) / "sglang-server.log").exists()  # nothing was started


def test_the_paper_request_mix_reaches_bench_serving(tmp_path, result_schema):
    """The paper preset on four FAKE GPUs: one server with --tp 4, and the
    client gets the upstream's mix (inputs up to 1024, outputs up to 256,
    lengths uniform from 0: --random-range-ratio 0, no --max-concurrency, rate
    inf). Only the number of prompts is cut, which the result says breaks
    comparability."""
    from conftest import FakeNode
    from fakes.fake_gpu_state import make_devices

    node = with_standin(FakeNode(tmp_path, make_devices(4, "nvidia")),
                        HPCAI_SGLANG_STANDIN_TOKEN_S="0.0005")
    done = node.launch("llama3-8b-inference", "--preset", "paper", "--device", "cuda",
                       "--steps-per-epoch", "40", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    folder = run_dir(node)
    assert "--tp-size 4 --dp-size 1" in (folder / "sglang-server.log").read_text()
    # What the client parsed (the stand-in prints its argparse namespace, as SGLang's does).
    client_log = (folder / "sglang-bench.log").read_text()
    for fragment in ("random_input_len=1024", "random_output_len=256", "random_range_ratio=0.0",
                     "max_concurrency=None", "request_rate=inf", "num_prompts=40",
                     "dataset_name='random-ids'"):
        assert fragment in client_log, (fragment, client_log[:2000])
    m = doc["workload_metrics"]
    assert m["requests"]["completed"] == 40
    # Uniform lengths: far fewer tokens than 40 full-length requests, and not fixed.
    assert not m["lengths_fixed"]
    assert 0 < m["tokens"]["input"] < 40 * 1024 and 0 < m["tokens"]["output"] < 40 * 256
    cfg = doc["config"]
    assert cfg["max_concurrency"] == "unlimited" and cfg["length_range_ratio"] == 0.0
    assert cfg["warmup_requests"] == 100
    # Per GPU and per node, whatever the preset; the node figure covers the 4 GPUs.
    assert doc["throughput"]["devices_node"] == 4
    assert doc["throughput"]["per_gpu"] == pytest.approx(doc["throughput"]["node"] / 4)
    c = doc["comparability"]
    assert c["preset_kind"] == "paper" and c["comparable_to_paper"] is False
    assert c["reasons"] == [c["reasons"][0]] and c["reasons"][0].startswith(
        "--steps-per-epoch 40 overrides the paper preset's 2048")


def test_the_concurrency_ramp_probes_each_and_measures_at_the_one_kept(cpu_node, result_schema):
    """`fast`'s ramp, shortened: one wave of the client at 2 and at 4 in flight, each
    probe's figures in the result, the measured load at the concurrency the rule keeps."""
    node = with_standin(cpu_node)
    done = node.launch(*TINY, "--concurrency-ramp", "2,4", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    found = doc["config"]["concurrency_ramp"]
    assert found["probed"] == [2, 4] and [p["concurrency"] for p in found["probes"]] == [2, 4]
    folder = run_dir(node)
    for probe in found["probes"]:
        assert probe["requests"] == probe["concurrency"] and probe["output_tokens"] == probe["requests"] * 8
        assert probe["output_tokens_per_s"] > 0
        result = (folder / probe["folder"] / "sglang-bench.jsonl").read_text()
        assert f'"max_concurrency": {probe["concurrency"]}' in result  # the client ran at it
    best = max(p["output_tokens_per_s"] for p in found["probes"])
    kept = min(p["concurrency"] for p in found["probes"] if p["output_tokens_per_s"] >= 0.97 * best)
    assert found["chosen"] == kept == doc["config"]["max_concurrency"]
    assert doc["workload_metrics"]["steady_state"]["target_concurrency"] == kept
    assert doc["workload_metrics"]["requests"]["completed"] == 8
    assert f"measuring at {kept} in flight" in done.stderr
    assert_server_gone(folder)


def test_a_given_batch_size_skips_the_ramp(cpu_node, result_schema):
    node = with_standin(cpu_node)
    done = node.launch(*TINY, "--concurrency-ramp", "2,4", "--batch-size", "3", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["config"]["max_concurrency"] == 3
    assert "--batch-size given" in doc["config"]["concurrency_ramp"]["skipped"]
    assert not (run_dir(node) / "concurrency-ramp").exists()
