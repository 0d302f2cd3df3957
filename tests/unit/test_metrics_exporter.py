"""The metrics exporter (launcher/metrics) on FAKE GPUs (tests/fakes/pynvml.py): the
exposition carries the fake GPUs' values, one read serves many scrapes, the limit's
holder and the run come from the node's cap authority, and bad input is one line."""
from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, one_line_error
from disks import small_disk
from fakes import fake_gpu_state as fgs
from hpcai.gpu import open_library
from hpcai.launcher.metrics.collector import DCGM_EQUIVALENTS, exposed_names, exposition, registry_for
from hpcai.launcher.metrics.sampler import CachedSampler
from hpcai.launcher.power.authority import GpuAuthority, write_private_json
from hpcai.launcher.power.job_caps import job_record_path
from hpcai.launcher.run.spec import make_run_id
from hpcai.measure.pm_counters import PmCountersSource
from hpcai.workloads.catalog import WORKLOADS

DASHBOARD = ROOT / "examples" / "grafana" / "hpcai.json"


def _devices():
    """Two GPUs that differ in every value the exporter shows."""
    devices = fgs.make_devices(2, "nvidia")
    devices[0].update(power_draw_w=412.0, temperature_c=61.0, sm_clock_mhz=1755.0, throttle_reasons=0x4 | 0x20)
    devices[1].update(power_draw_w=233.0, temperature_c=48.0, memory_clock_mhz=1593.0,
                      enforced_limit_w=450.0, energy_mj=5.0e6, energy_frozen=True)
    return devices


@pytest.fixture
def node(tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", _devices())
    library = open_library("nvidia")
    yield library
    library.close()


def _scrape(sampler) -> dict:
    """{(sample name, frozen labels): value} of one scrape."""
    text = exposition(registry_for(sampler)).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict, name: str, **labels) -> float:
    matches = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def test_exposition_carries_each_fake_gpus_values(node, tmp_path):
    devices = fgs.read_state(tmp_path / "gpus.json")["devices"]
    samples = _scrape(CachedSampler(node.devices(), lock_root=tmp_path / "none"))
    for i, dev in enumerate(devices):
        gpu = {"uuid": dev["uuid"], "index": str(i), "model": dev["name"]}
        assert _value(samples, "hpcai_gpu_power_watts", **gpu) == fgs.reported_power_w(dev)
        assert _value(samples, "hpcai_gpu_power_limit_watts", **gpu) == fgs.enforced_limit_w(dev)
        assert _value(samples, "hpcai_gpu_sm_clock_hertz", **gpu) == dev["sm_clock_mhz"] * 1e6
        assert _value(samples, "hpcai_gpu_memory_clock_hertz", **gpu) == dev["memory_clock_mhz"] * 1e6
        assert _value(samples, "hpcai_gpu_temperature_celsius", **gpu) == dev["temperature_c"]
        assert _value(samples, "hpcai_gpu_up", **gpu) == 1.0
        assert _value(samples, "hpcai_gpu_power_limit_holder", **gpu, kind="none") == 1.0
    frozen = {"uuid": devices[1]["uuid"]}
    assert _value(samples, "hpcai_gpu_energy_joules_total", **frozen) == 5000.0  # mJ -> J
    first = {"uuid": devices[0]["uuid"]}
    assert _value(samples, "hpcai_gpu_throttle_reason", **first, reason="sw_power_cap") == 1.0
    assert _value(samples, "hpcai_gpu_throttle_reason", **first, reason="sw_thermal") == 1.0
    assert _value(samples, "hpcai_gpu_throttle_reason", **first, reason="hw_slowdown") == 0.0
    assert _value(samples, "hpcai_gpu_throttle_reason", **frozen, reason="sw_power_cap") == 0.0


def test_one_read_of_the_node_serves_every_scrape_within_max_age(node, tmp_path):
    cached = CachedSampler(node.devices(), max_age_s=3600.0, lock_root=tmp_path / "none")
    registry = registry_for(cached)
    for _ in range(5):
        exposition(registry)
    assert cached.reads == 1
    fresh = CachedSampler(node.devices(), max_age_s=0.0, lock_root=tmp_path / "none")
    registry = registry_for(fresh)
    for _ in range(3):
        exposition(registry)
    assert fresh.reads == 3


def test_limit_holder_and_run_state_from_the_nodes_authority(node, tmp_path):
    root = tmp_path / "authority"
    uuids = [g.info().uuid for g in node.devices()]
    run_id = make_run_id("llama3-8b-pretrain", "tiny", 300.0) + "-inrun"
    with GpuAuthority([uuids[0]], run_id, root=root, job_id="4242"):
        write_private_json(job_record_path(uuids[1], root), {"job_id": "977", "uid": 1000})
        samples = _scrape(CachedSampler(node.devices(), lock_root=root, workloads=WORKLOADS))
    assert _value(samples, "hpcai_gpu_power_limit_holder", uuid=uuids[0], kind="hpcai-run",
                  run_id=run_id, job_id="4242") == 1.0
    assert _value(samples, "hpcai_gpu_power_limit_holder", uuid=uuids[1], kind="slurm-job", job_id="977") == 1.0
    assert _value(samples, "hpcai_run_info", run_id=run_id, workload="llama3-8b-pretrain",
                  job_id="4242", in_run="true") == 1.0
    assert _value(samples, "hpcai_run_cap_watts", run_id=run_id) == 300.0
    assert _value(samples, "hpcai_run_gpus", run_id=run_id) == 1.0
    # The lock released: its holder record no longer names a holder.
    after = _scrape(CachedSampler(node.devices(), lock_root=root, workloads=WORKLOADS))
    assert _value(after, "hpcai_gpu_power_limit_holder", uuid=uuids[0], kind="none") == 1.0
    assert not [k for k in after if k[0] == "hpcai_run_info"]


def test_an_in_run_sweeps_segment_and_its_cap_from_the_holder_records(node, tmp_path):
    """An in-run sweep's process names its current segment in its holder records
    (GpuAuthority.mark_segment): hpcai_run_segment is its index, and the run's cap
    the segment's, not the first cap its id holds."""
    root = tmp_path / "authority"
    uuids = [g.info().uuid for g in node.devices()]
    run_id = make_run_id("llama3-8b-pretrain", "tiny", 300.0) + "-inrun"
    sampler = CachedSampler(node.devices(), max_age_s=0.0, lock_root=root, workloads=WORKLOADS)
    with GpuAuthority(uuids, run_id, root=root) as held:
        warm_up = _scrape(sampler)  # before the first segment: no index, the id's cap
        held.mark_segment(0, 300.0)
        first = _scrape(sampler)
        held.mark_segment(2, 225.5)
        third = _scrape(sampler)
        # Mid-rewrite: one GPU's record already names the next segment; the run is in it.
        write_private_json(root / f"gpu-{uuids[1]}.holder.json",
                           {**held.record, "segment": 3, "segment_cap_w": 200.0})
        next_one = _scrape(sampler)
    assert not [k for k in warm_up if k[0] == "hpcai_run_segment"]
    assert _value(warm_up, "hpcai_run_cap_watts", run_id=run_id) == 300.0
    assert _value(first, "hpcai_run_segment", run_id=run_id) == 0.0
    assert _value(first, "hpcai_run_cap_watts", run_id=run_id) == 300.0
    assert _value(third, "hpcai_run_segment", run_id=run_id) == 2.0
    assert _value(third, "hpcai_run_cap_watts", run_id=run_id) == 225.5
    assert _value(third, "hpcai_run_gpus", run_id=run_id) == 2.0
    assert _value(next_one, "hpcai_run_segment", run_id=run_id) == 3.0
    assert _value(next_one, "hpcai_run_cap_watts", run_id=run_id) == 200.0
    assert not [k for k in _scrape(sampler) if k[0] in ("hpcai_run_segment", "hpcai_run_cap_watts")]


@pytest.mark.parametrize("segment", [
    {"segment": "1", "segment_cap_w": 250.0},
    {"segment": True, "segment_cap_w": 250.0},
    {"segment": -1, "segment_cap_w": 250.0},
    {"segment": 1, "segment_cap_w": float("nan")},
    {"segment": 1, "segment_cap_w": 0},
    {"segment": 1},
])
def test_a_holder_record_with_no_sensible_segment_keeps_the_ids_cap(node, tmp_path, segment):
    root = tmp_path / "authority"
    uuid = node.devices()[0].info().uuid
    run_id = make_run_id("resnet50", "tiny", 300.0) + "-inrun"
    with GpuAuthority([uuid], run_id, root=root) as held:
        write_private_json(root / f"gpu-{uuid}.holder.json", {**held.record, **segment})
        samples = _scrape(CachedSampler(node.devices(), lock_root=root, workloads=WORKLOADS))
    assert not [k for k in samples if k[0] == "hpcai_run_segment"]
    assert _value(samples, "hpcai_run_cap_watts", run_id=run_id) == 300.0


def test_mark_segment_never_rewrites_a_record_it_does_not_own(node, tmp_path):
    """Another process's record, or a lock path that no longer names the locked file
    (the folder's file removed or replaced): left as it is."""
    root = tmp_path / "authority"
    uuids = [g.info().uuid for g in node.devices()]
    with GpuAuthority(uuids, "r-inrun", root=root) as held:
        other = {**held.record, "pid": 1}
        write_private_json(root / f"gpu-{uuids[0]}.holder.json", other)
        (root / f"gpu-{uuids[1]}.lock").unlink()
        before = (root / f"gpu-{uuids[1]}.holder.json").read_bytes()
        held.mark_segment(1, 250.0)
        assert json.loads((root / f"gpu-{uuids[0]}.holder.json").read_text()) == other
        assert (root / f"gpu-{uuids[1]}.holder.json").read_bytes() == before


def test_a_lost_gpu_is_named_and_the_others_still_exported(node, tmp_path):
    lost = 15  # NVML_ERROR_GPU_IS_LOST
    fgs.update_device(tmp_path / "gpus.json", 1, errors={"field_values": lost, "power_average": lost,
                                                         "energy": lost})
    samples = _scrape(CachedSampler(node.devices(), lock_root=tmp_path / "none"))
    uuids = [d["uuid"] for d in fgs.read_state(tmp_path / "gpus.json")["devices"]]
    assert _value(samples, "hpcai_gpu_up", uuid=uuids[1]) == 0.0
    assert not [k for k in samples if k[0] == "hpcai_gpu_power_watts" and ("uuid", uuids[1]) in k[1]]
    assert _value(samples, "hpcai_gpu_up", uuid=uuids[0]) == 1.0
    assert _value(samples, "hpcai_gpu_power_watts", uuid=uuids[0]) == 412.0


def _pm_tree(root: Path) -> Path:
    """A sysfs-shaped HPE Cray pm_counters folder (the kernel's file boundary)."""
    root.mkdir(parents=True)
    for name, value in {"power": "612 W", "energy": "100000 J", "freshness": "1", "raw_scan_hz": "10",
                        "version": "2", "startup": "1"}.items():
        stamp = "" if name in ("freshness", "raw_scan_hz", "version", "startup") else " 1700000000000000 us"
        (root / name).write_text(value + stamp + "\n")
    return root


def test_node_power_from_the_sites_source_and_a_failing_source_is_down(node, tmp_path):
    source = PmCountersSource(_pm_tree(tmp_path / "pm"))
    samples = _scrape(CachedSampler(node.devices(), [source], lock_root=tmp_path / "none"))
    assert _value(samples, "hpcai_node_power_watts", source="pm_counters", channel="node", scope="node") == 612.0
    assert _value(samples, "hpcai_node_power_source_up", source="pm_counters") == 1.0
    (tmp_path / "pm" / "power").unlink()
    samples = _scrape(CachedSampler(node.devices(), [source], lock_root=tmp_path / "none"))
    assert _value(samples, "hpcai_node_power_source_up", source="pm_counters") == 0.0
    assert not [k for k in samples if k[0] == "hpcai_node_power_watts"]


# ---- the command ----------------------------------------------------------------------------

def test_textfile_writes_the_exposition_atomically_readable_by_node_exporter(fake_nvidia_node, tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir(mode=0o755)
    done = fake_nvidia_node.launch("metrics", "textfile", str(folder))
    assert done.returncode == 0, done.stderr
    prom = folder / "hpcai.prom"
    assert (prom.stat().st_mode & 0o777) == 0o644
    names = {s.name for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
    assert {"hpcai_gpu_power_watts", "hpcai_gpu_energy_joules_total"} <= names
    assert [p.name for p in folder.iterdir()] == ["hpcai.prom"]  # no temporary file left


@pytest.mark.parametrize("mode", [0o775, 0o777, 0o1777])
def test_textfile_refuses_a_folder_others_can_write(fake_nvidia_node, tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    done = fake_nvidia_node.launch("metrics", "textfile", str(folder))
    one_line_error(done, f"refusing the textfile folder {folder}", "chmod go-w")
    assert done.returncode == 2 and list(folder.iterdir()) == []


def test_textfile_never_follows_a_link_in_place_of_the_folder(fake_nvidia_node, tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(real)
    done = fake_nvidia_node.launch("metrics", "textfile", str(tmp_path / "link"))
    one_line_error(done, "cannot open the textfile folder", "never followed")
    assert list(real.iterdir()) == []


def test_textfile_on_a_full_disk_is_one_line_and_keeps_the_previous_file(fake_nvidia_node, tmp_path):
    folder = tmp_path / "small"
    with small_disk(folder, "256k") as mounted:
        folder.chmod(0o755)
        assert fake_nvidia_node.launch("metrics", "textfile", str(folder)).returncode == 0
        before = (folder / "hpcai.prom").read_bytes()
        if mounted:
            with open(folder / "filler", "ab", buffering=0) as filler:
                try:
                    while True:
                        filler.write(b"\0" * 4096)
                except OSError:
                    pass
        else:
            folder.chmod(0o555)
        done = fake_nvidia_node.launch("metrics", "textfile", str(folder))
        one_line_error(done, f"cannot write hpcai.prom in {folder}", "previous hpcai.prom is kept")
        assert ("Errno 28 ENOSPC" in done.stderr) if mounted else ("Errno 13" in done.stderr)
        assert (folder / "hpcai.prom").read_bytes() == before
        assert sorted(p.name for p in folder.iterdir()) == sorted(["hpcai.prom"] + (["filler"] if mounted else []))


@pytest.mark.parametrize("args, fragment", [
    (["textfile", "{tmp}", "--every", "nan"], "--every is nan, not a finite number"),
    (["textfile", "{tmp}", "--max-age", "inf"], "--max-age is inf, not a finite number"),
    (["serve", "--max-age", "-1"], "--max-age -1.0 is not a positive number"),
])
def test_bad_numbers_are_one_line_and_nothing_is_written(fake_nvidia_node, tmp_path, args, fragment):
    folder = tmp_path / "tf"
    folder.mkdir(mode=0o755)
    done = fake_nvidia_node.launch("metrics", *[a.replace("{tmp}", str(folder)) for a in args])
    one_line_error(done, fragment)
    assert done.returncode == 2 and list(folder.iterdir()) == []


def test_serve_answers_prometheus_and_openmetrics(fake_nvidia_node):
    proc = fake_nvidia_node.popen("metrics", "serve", "--port", "0")
    try:
        url = _served_url(proc)
        text = urllib.request.urlopen(url, timeout=30).read().decode()
        assert "hpcai_gpu_power_watts{" in text
        request = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
            assert answer.read().decode().rstrip().endswith("# EOF")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _served_url(proc) -> str:
    line = proc.stdout.readline()
    match = re.search(r"on (http://\S+/metrics)", line)
    assert match, line + (proc.stdout.read() if proc.poll() is not None else "")
    return match.group(1)


def test_serve_on_a_port_in_use_is_one_line(fake_nvidia_node):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = fake_nvidia_node.launch("metrics", "serve", "--port", str(busy.getsockname()[1]))
    one_line_error(done, "cannot listen on 127.0.0.1:", "choose a free --port")


# ---- the dashboard ----------------------------------------------------------------------------

def _dashboard_metric_names(doc: dict) -> set[str]:
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v.get("query", {}).get("query", "") if isinstance(v.get("query"), dict) else v.get("query", "")
              for v in doc.get("templating", {}).get("list", [])]
    assert exprs
    names = set()
    for expr in exprs:
        names |= set(re.findall(r"\b(?:hpcai_[a-z_]+|DCGM_FI_[A-Z_]+)\b", expr))
    return names


def test_the_dashboard_names_only_metrics_the_exporter_or_dcgm_exposes(node, tmp_path):
    doc = json.loads(DASHBOARD.read_text())
    assert doc["panels"] and doc["title"]
    root = tmp_path / "authority"
    uuids = [g.info().uuid for g in node.devices()]
    with GpuAuthority([uuids[0]], make_run_id("resnet50", "tiny", 250.0) + "-inrun", root=root) as held:
        held.mark_segment(1, 200.0)  # an in-run sweep's: every run family has a series
        sampler = CachedSampler(node.devices(), [PmCountersSource(_pm_tree(tmp_path / "pm"))],
                                lock_root=root, workloads=WORKLOADS)
        ours = exposed_names(registry_for(sampler))
    dcgm = {name for name, _unit in DCGM_EQUIVALENTS.values()}
    named = _dashboard_metric_names(doc)
    assert named - ours - dcgm == set()
    assert {"hpcai_gpu_power_watts", "hpcai_run_info", "hpcai_node_power_watts"} <= named
    assert named & dcgm  # falls back to dcgm-exporter's names where they overlap


@pytest.mark.parametrize("workload, preset, cap, suffix", [
    ("llama3-8b-inference", "tiny", 275.5, "-sm1410MHz"),  # plan.py appends clock caps
    ("resnet50", "paper", None, ""),
    ("vit-l16", "short", 400.0, "-inrun"),
])
def test_a_runs_state_from_its_id(workload, preset, cap, suffix):
    from hpcai.launcher.metrics.sampler import run_state

    run_id = make_run_id(workload, preset, cap) + suffix
    state = run_state(run_id, None, ["GPU-b", "GPU-a"], WORKLOADS)
    assert (state["workload"], state["cap_w"], state["in_run"]) == (workload, cap, suffix == "-inrun")
    assert state["gpus"] == ["GPU-a", "GPU-b"] and state["job_id"] == ""
