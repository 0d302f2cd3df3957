"""A real Prometheus (Debian's package, started here on a free loopback port) scrapes
`hpcai-launch metrics serve` on FAKE GPUs (tests/fakes/pynvml.py) every second: the
series arrive with the fake GPUs' values, every query of the Grafana dashboard runs,
and `promtool check metrics` passes on the exposition."""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, FakeNode
from fakes import fake_gpu_state as fgs
from processes import kill_marked, new_mark, popen_options

DASHBOARD = ROOT / "examples" / "grafana" / "hpcai.json"
DEADLINE_S = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read()


class Prometheus:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict]:
        doc = json.loads(_get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert doc["status"] == "success", (expr, doc)
        return doc["data"]["result"]

    def wait_for(self, expr: str, count: int) -> list[dict]:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            result = self.query(expr)
            if len(result) >= count:
                return result
            assert time.monotonic() < deadline, f"{expr}: {result} after {DEADLINE_S} s"
            time.sleep(0.5)


def _devices():
    devices = fgs.make_devices(2, "nvidia")
    devices[0].update(power_draw_w=512.0, temperature_c=66.0, sm_clock_mhz=1410.0, throttle_reasons=0x4)
    devices[1].update(power_draw_w=301.0, temperature_c=52.0, enforced_limit_w=350.0,
                      energy_mj=7.25e6, energy_frozen=True)
    return devices


@pytest.fixture
def prometheus_server(tmp_path):
    """The exporter on fake GPUs, and a private Prometheus scraping it every second."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("prometheus is not installed: run `make setup-system` as root (apt-get install prometheus)")
    node = FakeNode(tmp_path, _devices())
    exporter = node.popen("metrics", "serve", "--port", "0", "--max-age", "0.5")
    line = exporter.stdout.readline()
    match = re.search(r"on (http://\S+/metrics)", line)
    assert match, line
    target = match.group(1).removeprefix("http://").removesuffix("/metrics")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      f"scrape_configs:\n  - job_name: hpcai\n    static_configs:\n      - targets: ['{target}']\n")
    port, mark = _free_port(), new_mark()
    log = open(tmp_path / "prometheus.log", "w")
    server = subprocess.Popen([exe, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                              **popen_options(dict(node.env), mark))
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                _get(f"http://127.0.0.1:{port}/-/ready", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "prometheus did not get ready"
                time.sleep(0.3)
        yield Prometheus(port), node, match.group(1)
    finally:
        server.terminate()
        exporter.terminate()
        try:
            server.wait(timeout=20)
            exporter.wait(timeout=20)
        finally:
            kill_marked(mark)
            node.stop_everything()
            log.close()


def _by_uuid(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["uuid"]: float(r["value"][1]) for r in result}


def test_prometheus_scrapes_the_fake_gpus_values(prometheus_server):
    prom, node, _url = prometheus_server
    devices = node.devices()
    power = _by_uuid(prom.wait_for('hpcai_gpu_power_watts{job="hpcai"}', 2))
    assert power == {d["uuid"]: fgs.reported_power_w(d) for d in devices}
    for metric, expected in (("hpcai_gpu_power_limit_watts", fgs.enforced_limit_w),
                             ("hpcai_gpu_temperature_celsius", lambda d: d["temperature_c"]),
                             ("hpcai_gpu_sm_clock_hertz", lambda d: d["sm_clock_mhz"] * 1e6),
                             ("hpcai_gpu_memory_clock_hertz", lambda d: d["memory_clock_mhz"] * 1e6)):
        assert _by_uuid(prom.query(metric)) == {d["uuid"]: expected(d) for d in devices}, metric
    frozen = devices[1]["uuid"]
    assert _by_uuid(prom.query("hpcai_gpu_energy_joules_total"))[frozen] == 7250.0
    throttled = prom.query('hpcai_gpu_throttle_reason{reason="sw_power_cap"} == 1')
    assert [r["metric"]["uuid"] for r in throttled] == [devices[0]["uuid"]]
    labels = prom.query(f'hpcai_gpu_up{{uuid="{frozen}"}}')[0]["metric"]
    assert labels["index"] == "1" and labels["model"] == devices[1]["name"]
    assert [float(r["value"][1]) for r in prom.query('up{job="hpcai"}')] == [1.0]
    # A change on the node reaches Prometheus through the exporter's cache.
    node.update(0, temperature_c=71.0)
    deadline = time.monotonic() + DEADLINE_S
    while _by_uuid(prom.query("hpcai_gpu_temperature_celsius"))[devices[0]["uuid"]] != 71.0:
        assert time.monotonic() < deadline, "the new temperature never arrived"
        time.sleep(0.5)


def test_every_dashboard_query_runs_and_the_gpu_panels_have_data(prometheus_server):
    prom, _node, _url = prometheus_server
    prom.wait_for("hpcai_gpu_energy_joules_total", 2)
    time.sleep(2.5)  # two more scrapes: increase() over the range needs two points
    doc = json.loads(DASHBOARD.read_text())
    for panel in doc["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$instance", ".*").replace("$__range", "1m")
            result = prom.query(expr)  # a PromQL error fails inside query()
            if panel["title"].startswith("GPU") or "clock" in panel["title"]:
                assert result, (panel["title"], expr)


def test_promtool_accepts_the_exposition(prometheus_server):
    _prom, _node, url = prometheus_server
    text = _get(url)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", done
