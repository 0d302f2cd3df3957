"""SGLang serving: parallel sizes, the commands, the client's result, and how
server processes are stopped."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import pid_alive as alive
from hpcai.errors import UsageError, WorkloadError
from hpcai.workloads import distributed
from hpcai.workloads import engine_process as proc
from hpcai.workloads import llm_serve as S
from hpcai.workloads.catalog import LLAMA3_8B_INFERENCE


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.mark.parametrize("tp,dp,gpus,expected", [
    (None, None, 4, (1, 4)), (2, None, 4, (2, 2)), (None, 2, 4, (2, 2)), (4, 1, 4, (4, 1)),
    (None, None, 1, (1, 1)),
])
def test_parallel_sizes_use_every_gpu(tp, dp, gpus, expected):
    assert S.parallel_sizes(tp, dp, gpus) == expected


@pytest.mark.parametrize("tp,dp,gpus", [(3, None, 4), (2, 3, 4), (None, 8, 4), (0, None, 1)])
def test_parallel_sizes_that_do_not_fit_are_usage_errors(tp, dp, gpus):
    with pytest.raises(UsageError):
        S.parallel_sizes(tp, dp, gpus)


def ctx(device="cpu"):
    return distributed.Context(0, 1, 0, 1, device, None, None, 2, "host")


def spec(tmp_path, preset="tiny", gpus=None, **params):
    return {"params": {**LLAMA3_8B_INFERENCE.presets[preset].params, **params},
            "protocol": dict(LLAMA3_8B_INFERENCE.presets[preset].protocol),
            "devices": {"type": "cuda" if gpus else "cpu", "gpu_indices": gpus},
            "output_dir": str(tmp_path / "run"), "seed": 3}


def test_commands_serve_dummy_weights_and_drive_fixed_lengths(tmp_path):
    workload = S.build(spec(tmp_path, "fast", gpus=[0, 1, 2, 3], tp=2,
                            server_args="--mem-fraction-static 0.8"), ctx("cuda"))
    workload.port = 4321
    server = workload.server_command()
    assert server[1:3] == ["-m", "sglang.launch_server"]
    flags = dict(zip(server[3::2], server[4::2]))
    assert flags["--tp-size"] == "2" and flags["--dp-size"] == "2"
    assert flags["--load-format"] == "dummy" and flags["--port"] == "4321"
    assert server[-2:] == ["--mem-fraction-static", "0.8"]
    client = workload.client_command(640)
    # SGLang 0.5.19's own module (sglang.bench_serving is a deprecated alias there), run
    # through hpcai's wrapper, which records each request's timestamps in the run's folder.
    assert client[1:4] == ["-m", "hpcai.workloads.sglang_client",
                           str(workload.out_dir / "sglang-bench-requests.json")]
    assert S.CLIENT_MODULE == "sglang.benchmark.serving"
    assert "--tokenize-prompt" not in client  # hpcai's word tokenizer round-trips exactly
    flags = dict(zip(client[4::2], client[5::2]))
    assert flags["--dataset-name"] == "random-ids" and flags["--random-range-ratio"] == "1.0"
    assert (flags["--random-input-len"], flags["--random-output-len"]) == ("1024", "1024")
    assert flags["--num-prompts"] == "640" and flags["--max-concurrency"] == "64"
    assert flags["--request-rate"] == "inf" and flags["--warmup-requests"] == "0"
    assert workload.describe()["task"] == "inference"


def test_real_weights_are_served_from_their_folder(tmp_path):
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 128256}))
    workload = S.build(spec(tmp_path, weights=str(model), request_rate=2.5), ctx())
    assert "--load-format" not in workload.server_command()
    assert workload.model_dir == model.resolve() and workload.vocab_size == 128256
    client = workload.client_command(8)
    assert client[client.index("--request-rate") + 1] == "2.5"
    # A real tokenizer: the client sends the ids, not text the server re-encodes.
    assert "--tokenize-prompt" in client


@pytest.mark.parametrize("server_args,flag,hint", [
    ("--port 30000", "--port", "hpcai picks a free port"),
    ("--mem-fraction-static 0.8 --tp-size 2", "--tp-size", "--tp"),
    ("--tensor-parallel-size=2", "--tensor-parallel-size", "--tp"),
    ("--data-parallel-size 4", "--data-parallel-size", "--dp"),
    ("--dp 4", "--dp", "--dp"),  # argparse would take the abbreviation for --dp-size
    ("--model-path /other", "--model-path", "--weights"),
    ("--model /other", "--model", "--weights"),
    ("--random-seed 7", "--random-seed", "--seed"),
    ("--load-format auto", "--load-format", "--weights"),
    ("--host 0.0.0.0", "--host", "127.0.0.1"),
])
def test_server_args_may_not_override_what_hpcai_sets(tmp_path, server_args, flag, hint):
    """SGLang's parser keeps the last of a repeated flag (server_args.py uses argparse):
    these would silently override hpcai's own."""
    with pytest.raises(UsageError) as err:
        S.build(spec(tmp_path, server_args=server_args), ctx())
    line = err.value.one_line()
    assert f"--server-args sets {flag}," in line and hint in line and "\n" not in line


def test_other_server_args_pass_through(tmp_path):
    workload = S.build(spec(tmp_path, server_args="--mem-fraction-static 0.8 --tp-worker-threads 2"), ctx())
    assert workload.server_command()[-4:] == ["--mem-fraction-static", "0.8", "--tp-worker-threads", "2"]


def test_loopback_is_kept_away_from_proxies():
    env = S.loopback_env({"http_proxy": "http://proxy:3128", "no_proxy": "example.org", "NO_PROXY": ""})
    assert env["no_proxy"] == "example.org,127.0.0.1,localhost"
    assert env["NO_PROXY"] == "127.0.0.1,localhost"
    assert S.loopback_env(env)["no_proxy"] == env["no_proxy"]  # nothing added twice


def test_hpcai_s_own_requests_ignore_the_proxy(monkeypatch):
    """A proxy that is not there: urllib's default opener would fail through it."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dead = S.free_port()
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{dead}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        assert proc.get_json(f"http://127.0.0.1:{server.server_port}/model_info") == {"ok": True}
    finally:
        server.shutdown()
        server.server_close()


def test_the_server_stop_grace_stays_under_the_launcher_s(tmp_path):
    assert S.build(spec(tmp_path), ctx()).stop_grace_s <= S.MAX_SERVER_STOP_GRACE_S
    params = {k: v for k, v in spec(tmp_path)["params"].items() if k != "server_stop_grace_s"}
    assert S.build({**spec(tmp_path), "params": params}, ctx()).stop_grace_s == 20
    with pytest.raises(UsageError) as err:
        S.build(spec(tmp_path, server_stop_grace_s=30), ctx())
    assert "under the launcher's 30 s grace" in err.value.one_line()


@pytest.mark.parametrize("params,expected", [
    ({"batch_size": "auto"}, "--batch-size auto has no meaning"),
    ({"input_len": 250, "output_len": 10}, "exceed the model's context of 256"),
    ({"model": "gpt-5"}, "no built-in configuration for model 'gpt-5'"),
    ({"request_rate": -1.0}, "--request-rate must be positive"),
    ({"tp": 2}, "does not use the run's 1 GPU"),
])
def test_bad_parameters_are_one_line_usage_errors(tmp_path, params, expected):
    with pytest.raises(UsageError) as err:
        S.build(spec(tmp_path, **params), ctx())
    assert expected in err.value.one_line() and "\n" not in err.value.one_line()


def test_weights_folder_needs_a_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no config.json"):
        S.build(spec(tmp_path, weights=str(tmp_path / "empty")), ctx())


def test_more_than_one_measured_epoch_is_refused_before_anything_starts(tmp_path):
    workload = S.build(spec(tmp_path), ctx())
    with pytest.raises(UsageError, match="one continuous load"):
        workload.run({"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 8}, None)
    assert workload.server is None and not (tmp_path / "run" / S.SERVER_LOG).exists()


def test_the_client_s_last_result_line_is_read(tmp_path):
    path = tmp_path / S.CLIENT_RESULT
    path.write_text(json.dumps({"completed": 1}) + "\n" + json.dumps({
        "completed": 7, "mean_ttft_ms": 1.0, "median_ttft_ms": 2.0, "p99_ttft_ms": 3.0,
        "mean_itl_ms": 4.0, "median_itl_ms": 5.0, "p90_itl_ms": 5.2, "p95_itl_ms": 5.5, "p99_itl_ms": 6.0,
        "mean_tpot_ms": 7.0, "median_tpot_ms": 8.0, "p99_tpot_ms": 9.0}) + "\n")
    bench = S.parse_bench_result(path)
    assert bench["completed"] == 7
    stats = S.latency_stats(bench)
    assert stats["ttft"] == {"mean": 1.0, "median": 2.0, "p99": 3.0}
    assert stats["itl"] == {"mean": 4.0, "median": 5.0, "p99": 6.0, "p90": 5.2, "p95": 5.5}
    assert stats["e2e"] == {"mean": None, "median": None, "p99": None}
    with pytest.raises(WorkloadError, match="wrote no result"):
        S.parse_bench_result(tmp_path / "missing.jsonl")


# ---- process groups -------------------------------------------------------------

FAMILY = """
import os, signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)"])
print(f"pids {os.getpid()} {child.pid}", flush=True)
while True:
    time.sleep(1)
"""


def start_family(tmp_path, mode: str, grace: float) -> tuple[proc.GroupProcess, list[int]]:
    group = proc.GroupProcess("family", [sys.executable, "-c", FAMILY, mode],
                              tmp_path / "family.log", stop_grace_s=grace)
    group.start(watch=("pids",))
    deadline = time.monotonic() + 20
    while not group.line_times:
        assert time.monotonic() < deadline, (tmp_path / "family.log").read_text()
        time.sleep(0.05)
    pids = [int(p) for p in group.line_times[0][1].split()[1:]]
    assert all(alive(p) for p in pids)
    return group, pids


def test_stop_ends_the_leader_and_its_children(tmp_path):
    group, pids = start_family(tmp_path, "obey", grace=10)
    started = time.monotonic()
    group.stop()
    assert time.monotonic() - started < 5  # SIGTERM was enough
    assert not any(alive(p) for p in pids)
    assert "SIGKILL" not in (tmp_path / "family.log").read_text()


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path):
    group, pids = start_family(tmp_path, "ignore", grace=1)
    group.stop()
    assert not any(alive(p) for p in pids)
    assert "sending SIGKILL" in (tmp_path / "family.log").read_text()


def test_a_signal_during_stop_does_not_cut_it_short(tmp_path):
    """A second SIGTERM (Slurm, an impatient user) while the server is being
    stopped: the stop still ends with SIGKILL, then the signal is raised."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from hpcai.errors import Interrupted\n"
        "from hpcai.signals import install_signal_handlers\n"
        "from hpcai.workloads.engine_process import GroupProcess\n"
        f"g = GroupProcess('family', [sys.executable, '-c', {FAMILY!r}, 'ignore'],"
        f" Path({str(tmp_path / 'family.log')!r}), stop_grace_s=2)\n"
        "g.start(watch=('pids',))\n"
        "while not g.line_times: time.sleep(0.05)\n"
        "print(g.line_times[0][1], flush=True)\n"
        "with install_signal_handlers():\n"
        "    try:\n"
        "        print('stopping', flush=True)\n"
        "        g.stop()\n"
        "        print('not interrupted', flush=True)\n"
        "    except Interrupted as exc:\n"
        "        print('interrupted', exc.signum, flush=True)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in parent.stdout.readline().split()[1:]]
    assert parent.stdout.readline().strip() == "stopping"
    time.sleep(0.5)
    parent.send_signal(signal.SIGTERM)
    out, _ = parent.communicate(timeout=30)
    assert out.strip() == f"interrupted {int(signal.SIGTERM)}"
    assert "sending SIGKILL" in (tmp_path / "family.log").read_text()
    assert not any(alive(p) for p in pids)


def test_a_server_does_not_outlive_a_killed_entrypoint(tmp_path):
    """SIGKILL leaves no chance to clean up: the kernel's parent-death signal does it."""
    parent_code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from hpcai.workloads.engine_process import GroupProcess\n"
        f"g = GroupProcess('server', [sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'],"
        f" Path({str(tmp_path / 'server.log')!r}))\n"
        "g.start()\n"
        "print(g.pid, flush=True)\n"
        "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    time.sleep(0.5)  # let the shim arm the signal and exec the command
    assert alive(server_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    assert wait_gone(server_pid), "the server outlived its killed parent"


def test_readiness_fails_at_once_when_the_server_exits(tmp_path):
    group = proc.GroupProcess("server", [sys.executable, "-c", "import sys; sys.exit(7)"],
                              tmp_path / "server.log")
    group.start()
    started = time.monotonic()
    with pytest.raises(WorkloadError) as err:
        proc.wait_until_ready(group, "http://127.0.0.1:9/none", 60, "the test server")
    assert time.monotonic() - started < 30
    assert "exited with code 7 before it was ready" in err.value.one_line()
    assert str(tmp_path / "server.log") in err.value.one_line()
    group.stop()


def test_readiness_times_out_with_a_pointer_to_the_log(tmp_path):
    group = proc.GroupProcess("server", [sys.executable, "-c", "import time; time.sleep(60)"],
                              tmp_path / "server.log", stop_grace_s=2)
    group.start()
    try:
        with pytest.raises(WorkloadError) as err:
            proc.wait_until_ready(group, f"http://127.0.0.1:{S.free_port()}/get_model_info", 1,
                                  "the test server")
        assert "was not ready after 1 s" in err.value.one_line()
        assert "server.log" in err.value.one_line() and "--server-timeout" in err.value.one_line()
    finally:
        group.stop()
    assert not alive(group.pid)
    assert os.path.exists(tmp_path / "server.log")


def test_a_training_result_whose_loss_is_not_finite_fails_loss_finite(result_schema):
    """NaN has no JSON: a loss that turned NaN is written as null. The schema takes the
    result; its validity check loss_finite fails it (never averaged). Serving has no loss."""
    import jsonschema

    from hpcai.measure.validity import evaluate
    from report_docs import make_result

    def loss_check(config: dict, first, last) -> dict:
        doc = make_result()
        doc["config"].update(config)
        doc["work"].update(first_loss=first, last_loss=last)
        assert not [e.json_path for e in jsonschema.Draft202012Validator(result_schema).iter_errors(doc)
                    if e.json_path.startswith("$.work.")]
        return next(c for c in evaluate(doc)["checks"] if c["name"] == "loss_finite")

    assert loss_check({}, 7.0, 6.0)["verdict"] == "pass"
    lost = loss_check({}, 7.0, None)
    assert (lost["verdict"], lost["value"]) == ("fail", "last_loss")
    assert loss_check({"task": "training"}, None, None)["value"] == "first_loss, last_loss"
    assert loss_check({"task": "inference"}, None, None)["verdict"] == "n/a"
