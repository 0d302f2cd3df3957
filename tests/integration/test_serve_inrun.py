"""In-run cap sweeps of SGLang serving: `hpcai-launch llama3-8b-inference
--preset tiny --cap LIST` starts ONE server, warms it up once, and measures
one load wave (one run of SGLang's benchmark client) per cap, the launcher
setting each segment's cap over the control channel. What answers is the
STAND-IN for SGLang in tests/standins (SGLang cannot serve on CPU machines);
hpcai's orchestration is the real code path. GPU limits and power readings
come from the FAKE pynvml (tests/fakes), whose reported power is
min(draw, cap): a wave measured under the wrong cap shows in its power.

The stand-in server prints `stand-in sglang.launch_server ARGS` and `standin
pids leader=PID child=PID` once per start (tests/standins/sglang/
launch_server.py main), and `standin stream start=... end=...` per streamed
request (the benchmark client streams; hpcai's own warm-up and settle waves
do not): the tests count servers and each wave's requests from its log.
"""
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, assert_valid_result, pid_alive

pytestmark = pytest.mark.slow
STANDINS = ROOT / "tests" / "standins"
# 24 requests of 32 tokens at 10 ms a token, 4 in flight: a steady state of
# about 1.5 s, over the 1 s window the validity checks want.
WAVE = ["llama3-8b-inference", "--preset", "tiny", "--device", "cuda", "--output-len", "32",
        "--steps-per-epoch", "24", "--idle-s", "0"]
REQUESTS = 24


def with_standin(node):
    # The stand-in computes nothing on the FAKE GPUs: they report the utilisation
    # of a busy server, so the validity checks judge the window, not an idle GPU.
    for index in range(len(node.devices())):
        node.update(index, utilization_pct=95.0)
    node.env["PYTHONPATH"] = os.pathsep.join([str(STANDINS), node.env["PYTHONPATH"]])
    node.env["HPCAI_SGLANG_STANDIN"] = ""
    node.env["HPCAI_SGLANG_STANDIN_TOKEN_S"] = "0.01"
    return node


def sweep_dir(node) -> Path:
    (folder,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    return folder


def summary(node) -> dict:
    return json.loads((sweep_dir(node) / "sweep.json").read_text())


def set_log(node) -> list[float]:
    return [e["watts"] for e in node.devices()[0]["set_log"]]


def server_starts(folder: Path) -> list[tuple[Path, int]]:
    """(log, leader pid) for every stand-in server start under folder."""
    starts = []
    for log in sorted(folder.glob("**/sglang-server.log")):
        starts += [(log, int(pid)) for pid in
                   re.findall(r"standin pids leader=(\d+) child=\d+", log.read_text())]
    return starts


def streams(log: Path) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in
            re.findall(r"standin stream start=([\d.]+) end=([\d.]+)", log.read_text())]


def results_by_cap(node) -> dict[float, dict]:
    docs = [json.loads(p.read_text()) for p in sweep_dir(node).glob("*/result.json")]
    return {d["spec"]["power"]["cap_w"]: d for d in docs}


def test_one_server_measures_a_load_wave_per_cap(fake_nvidia_node, result_schema):
    node = with_standin(fake_nvidia_node)
    args = [*WAVE, "--cap", "200,300,400", "--seed", "3", "-o", str(node.results)]
    done = node.launch(*args)
    assert done.returncode == 0, done.stderr
    assert "cannot measure in-run" not in done.stderr
    doc = summary(node)
    order = [r["cap_w"] for r in doc["runs"]]
    assert doc["in_run"] is True and [r["status"] for r in doc["runs"]] == ["complete"] * 3
    # Each cap set once in turn, the snapshot (700 W) back at the end.
    assert set_log(node) == [*order, 700.0]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []

    # ONE server for the whole sweep, in the process folder, and gone now.
    (process,) = [p for p in sweep_dir(node).iterdir() if p.name.endswith("-inrun")]
    starts = server_starts(sweep_dir(node))
    assert [log.parent for log, _ in starts] == [process], starts
    assert not pid_alive(starts[0][1])
    # Every wave's requests reached that one server: 3 x 24 streamed requests.
    all_streams = streams(process / "sglang-server.log")
    assert len(all_streams) == 3 * REQUESTS

    by_cap = results_by_cap(node)
    assert sorted(by_cap) == sorted(order)
    for k, cap in enumerate(order):
        result = by_cap[cap]
        assert_valid_result(result, result_schema)
        assert result["status"] == "complete"
        assert result["spec"]["sweep"]["in_run"] is True
        seg = result["segment"]
        assert seg["index"] == k and seg["in_run"] is True and seg["process_run_id"] == process.name
        assert seg["enforced_w"] == {"0": cap, "1": cap}
        # The wave's requests, counted as for a single serving run.
        m = result["workload_metrics"]
        assert m["requests"] == {"sent": REQUESTS, "completed": REQUESTS, "failed": 0}
        assert m["tokens"]["output"] == REQUESTS * 32
        assert m["output_tokens_per_s"] > 0 and m["latency_ms"]["ttft"]["median"] > 0
        assert m["steady_state"]["measured"] is True
        # The client's files are the segment's own; the server log the one server's.
        folder = sweep_dir(node) / result["run_id"]
        assert (folder / m["client_result"]).is_file() and (folder / m["client_log"]).is_file()
        assert (folder / m["server_log"]).resolve() == (process / "sglang-server.log").resolve()
        requests = json.loads((folder / "sglang-bench-requests.json").read_text())["requests"]
        assert len(requests) == REQUESTS
        # The measured window lies inside this wave: the server saw exactly this
        # wave's 24 streamed requests start between its window's ends.
        window = m["window"]
        inside = [s for s, _ in all_streams if window["start"] - 0.05 <= s <= window["end"]]
        assert len(inside) == REQUESTS
        assert result["timestamps"]["measured_start"] >= window["start"] - 0.05
        # Its energy and power are from the telemetry of this wave, under this cap.
        assert result["power"]["mean_power_w"] == pytest.approx(2 * min(650.0, cap), rel=0.02)
        limits = result["launcher"]["gpu_limits"][0]
        assert limits["enforced_at_start_w"] == limits["enforced_at_end_w"] == cap
        # Settle (hpcai's waves, warm-up epochs) then one load wave: no CI to stop on.
        settle, wave = result["measurement"]["settle"], result["measurement"]["window"]
        assert settle["epochs"] >= 1 and settle["stopped"] in ("settled", "max_settle")
        assert wave["mode"] == "load wave" and wave["stopped"] == "one load wave"
        assert wave["requests"] == REQUESTS and wave["ci_target"] is None
        assert [e["warmup"] for e in result["epochs"]] == [True] * settle["epochs"] + [False]
        assert (folder / "samples.csv").is_file()
        # Per segment: the cap bound (650 W wanted, the fake reports the cap), and the
        # wave split into prefill and decode from the client's request time stamps.
        assert result["power"]["cap_binding"]["binds"] is True
        assert result["power"]["cap_binding"]["limit_w"] == pytest.approx(cap)
        phases = m["serving_phases"]
        assert phases["prefill"]["duration_s"] > 0 and phases["decode"]["duration_s"] > 0
        assert phases["decode"]["j_per_output_token"] == pytest.approx(
            phases["decode"]["energy_j"] / (REQUESTS * 32))
        assert phases["decode"]["mean_power_w"] == pytest.approx(2 * min(650.0, cap), rel=0.05)
        # One MLPerf log per segment, in its folder; none for the process (every cap).
        assert (folder / "mllog.txt").is_file() and (folder / "power" / "mllog" / "node_0.txt").is_file()
        # A window long enough for the validity checks (over 1 s), settled drift.
        failed = [c for c in result["validity"]["checks"] if c["verdict"] == "fail"]
        assert failed == [], failed
    # Warmed up once: the process's record has the preset's one warm-up wave, then
    # the settle waves and the measured wave of every segment.
    record = json.loads((process / "process.json").read_text())
    assert record["status"] == "complete"
    assert record["sidecar"]["mllog"] is None and not (process / "mllog.txt").exists()
    settles = sum(r["measurement"]["settle"]["epochs"] for r in by_cap.values())
    assert len(record["epochs"]) == 1 + settles + 3


def test_resume_measures_only_the_missing_caps_in_one_new_server(fake_nvidia_node):
    node = with_standin(fake_nvidia_node)
    base = [*WAVE, "--order", "ascending", "-o", str(node.results)]
    first = node.launch(*base, "--cap", "200,300")
    assert first.returncode == 0, first.stderr
    assert len(server_starts(sweep_dir(node))) == 1
    # Extended by one cap: the complete two are kept, one new server measures 400 W.
    done = node.launch(*base, "--cap", "200,300,400")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("already complete, skipped") == 2
    assert set_log(node) == [200.0, 300.0, 700.0, 400.0, 700.0]
    starts = server_starts(sweep_dir(node))
    assert len(starts) == 2 and starts[0][0].parent != starts[1][0].parent
    assert len(streams(starts[1][0])) == REQUESTS  # the new server served the one wave
    runs = summary(node)["runs"]
    assert [r["status"] for r in runs] == ["complete"] * 3
    assert [r["skipped"] for r in runs] == [True, True, False]


def test_no_in_run_still_starts_one_server_per_cap(fake_nvidia_node, result_schema):
    node = with_standin(fake_nvidia_node)
    done = node.launch(*WAVE, "--cap", "200,300", "--order", "ascending", "--no-in-run",
                       "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    assert summary(node)["in_run"] is False
    starts = server_starts(sweep_dir(node))
    assert len(starts) == 2 and len({log.parent for log, _ in starts}) == 2
    assert set_log(node) == [200.0, 700.0, 300.0, 700.0]  # restored after each run
    by_cap = results_by_cap(node)
    assert sorted(by_cap) == [200.0, 300.0]
    for cap, result in by_cap.items():
        assert_valid_result(result, result_schema)
        assert result["power"]["mean_power_w"] == pytest.approx(2 * cap, rel=0.02)
        assert "segment" not in result and result["spec"]["sweep"].get("in_run") is not True
        # The one-run-per-cap path is unchanged: the preset's warm-up, one measured load.
        assert [e["warmup"] for e in result["epochs"]] == [True, False]
        assert result["workload_metrics"]["requests"]["completed"] == REQUESTS
        assert result["workload_metrics"]["server_log"] == "sglang-server.log"


def test_sigterm_during_a_wave_stops_client_and_server_and_restores_the_snapshot(
        fake_nvidia_node):
    node = with_standin(fake_nvidia_node)
    # 48 requests: a wave of about 4 s, so the signal lands inside the second one.
    proc = node.popen(*WAVE, "--cap", "200,300", "--order", "ascending",
                      "--steps-per-epoch", "48", "-o", str(node.results))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    deadline = time.time() + 300
    while True:  # the second segment's wave has begun: its client's start line
        assert proc.poll() is None, "".join(lines)
        assert time.time() < deadline, "".join(lines)
        started = [p for p in node.results.glob("sweep-*/*/sglang-bench.log")
                   if "Starting main benchmark run" in p.read_text()]
        if len(started) == 2:
            break
        time.sleep(0.1)
    (second,) = [p for p in started if json.loads(
        (p.parent / "result.json").read_text())["spec"]["power"]["cap_w"] == 300.0]
    client_pid = int(re.search(r"standin client pid=(\d+)", second.read_text())[1])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, "".join(lines)
    # The limits from before the sweep, not the first segment's 200 W; nothing left running.
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    assert set_log(node) == [200.0, 300.0, 700.0]
    assert not pid_alive(client_pid)
    ((_, leader),) = server_starts(sweep_dir(node))
    assert not pid_alive(leader)
    statuses = {cap: r["status"] for cap, r in results_by_cap(node).items()}
    assert statuses == {200.0: "complete", 300.0: "interrupted"}, statuses
    assert [r["status"] for r in summary(node)["runs"]] == ["complete", "interrupted"]
