"""GPUs by identity, caps read back as enforced, and readings that would
mislead (issue 12), with the FAKE pynvml/amdsmi (tests/fakes) as the node."""
from __future__ import annotations

import json
import time

import pytest

from conftest import FakeNode, one_line_error
from fakes import fake_gpu_state as fgs
from hpcai.gpu import open_library
from hpcai.gpu.base import GpuInfo, GpuReading
from hpcai.launcher.run import runtime
from hpcai.launcher.run.plan import Node, select_gpus
from hpcai.launcher.run.visibility import visible_gpus
from hpcai.measure import power_sources
from hpcai.workloads import result as R
from hpcai.measure import telemetry
from hpcai.measure.telemetry import Mark, Sampler


def _nvidia(n, **kw):
    return [GpuInfo(index=i, vendor="nvidia", name="H100", uuid=f"GPU-{i}aaa0000-0000-0000-0000-00000000000{i}",
                    memory_total_bytes=0, visible_id=f"GPU-{i}aaa0000-0000-0000-0000-00000000000{i}", **kw)
            for i in range(n)]


# ---- which GPUs, named how ----------------------------------------------------------
def test_a_cgroup_renumbered_job_gets_its_own_gpus_by_uuid(tmp_path, monkeypatch):
    # NVML sees 4 GPUs, this job may open 2 and 3; CUDA numbers them 0 and 1.
    devices = fgs.make_devices(4, "nvidia")
    devices[0]["inaccessible"] = devices[1]["inaccessible"] = "no_permission"
    fgs.install(monkeypatch, tmp_path / "gpus.json", devices)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    node = Node.detect("auto")
    chosen = select_gpus(node, None)
    assert [g.index for g, _ in chosen] == [3, 2]  # the job's order, not NVML's
    assert [i for _, i in chosen] == [devices[3]["uuid"], devices[2]["uuid"]]


@pytest.mark.parametrize("value,expected", [
    ("GPU-1aaa", [1]),  # a unique UUID prefix
    ("2aaa0000", [2]),  # a prefix without "GPU-"
    ("GPU-", []),  # not unique: CUDA stops there
    ("0,7,1", [0]),  # stops at the first entry naming nothing
    ("1,1", [1]),  # a GPU named twice ends the list
    ("NoDevFiles", []),  # Slurm with no GPU for this step
])
def test_cuda_visible_devices_forms(value, expected):
    got = visible_gpus(_nvidia(3), {"CUDA_VISIBLE_DEVICES": value})
    assert [g.index for g, _ in got] == expected


def test_a_mig_device_selects_its_parent_gpu_and_is_handed_on():
    mig = "MIG-4f0e0000-1111-2222-3333-444444444444"
    gpus = _nvidia(2)
    gpus[1] = GpuInfo(**{**gpus[1].to_dict(), "mig_enabled": True, "mig_uuids": (mig,)})
    got = visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": mig})
    assert [(g.index, i) for g, i in got] == [(1, mig)]


def test_amd_visibility_uses_rocrs_uuids_and_clears_the_other_masks(tmp_path, monkeypatch):
    devices = fgs.make_devices(3, "amd")
    fgs.install(monkeypatch, tmp_path / "gpus.json", devices)
    hip = ["GPU-" + d["uuid"].replace("-", "")[:16] for d in devices]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", f"{hip[2]},{hip[0]},1")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1,0")  # relative to what ROCr left
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    node = Node.detect("amd")
    chosen = select_gpus(node, None)
    assert [(g.index, i) for g, i in chosen] == [(0, hip[0])]
    env = runtime.child_environment("amd", [0, 2], "cuda", 2, [hip[0], hip[2]])
    assert env["ROCR_VISIBLE_DEVICES"] == f"{hip[0]},{hip[2]}"
    assert "HIP_VISIBLE_DEVICES" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_the_workload_is_handed_uuids_in_the_launchers_order(tmp_path):
    devices = fgs.make_devices(4, "nvidia")
    devices[0]["inaccessible"] = "no_permission"
    node = FakeNode(tmp_path, devices)
    node.env["CUDA_VISIBLE_DEVICES"] = "2,0"  # the job's GPUs are NVML 3 and 1
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cuda", "--gpus", "2",
                       "--dry-run", "--json", "--runtime", "host", "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout.split("\ncommand: ")[0])
    assert spec["devices"]["gpu_indices"] == [3, 1]
    assert spec["devices"]["visible_ids"] == [devices[3]["uuid"], devices[1]["uuid"]]
    env = runtime.child_environment("nvidia", spec["devices"]["gpu_indices"], "cuda", 2,
                                    spec["devices"]["visible_ids"])
    assert env["CUDA_VISIBLE_DEVICES"] == f"{devices[3]['uuid']},{devices[1]['uuid']}"


def test_cap_on_a_mig_gpu_is_refused_in_one_line(tmp_path):
    devices = fgs.make_devices(1, "nvidia", mig=["MIG-4f0e0000-1111-2222-3333-444444444444"])
    node = FakeNode(tmp_path, devices)
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "300",
                       "-o", str(node.results))
    one_line_error(done, "MIG", "GPU 0")
    assert node.devices()[0]["set_log"] == [] and node.journal_files() == []


def test_a_cap_the_gpu_enforces_lower_is_not_taken_for_the_cap(tmp_path):
    # A BMC or site limiter holds the GPU at 500 W whatever NVML's limit says.
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia", enforced_limit_w=500.0))
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "600",
                       "-o", str(node.results))
    one_line_error(done, "enforces 500 W")
    assert node.limits() == [700.0] and node.journal_files() == []  # restored
    assert [e["watts"] for e in node.devices()[0]["set_log"]] == [600.0, 700.0]


# ---- the sampler --------------------------------------------------------------------
def test_the_sampler_keeps_only_the_runs_gpus(tmp_path, monkeypatch):
    devices = fgs.make_devices(4, "nvidia")
    fgs.install(monkeypatch, tmp_path / "gpus.json", devices)
    found = power_sources.discover("auto")
    try:
        found.restrict({"gpu_uuids": [devices[2]["uuid"]], "gpu_indices": [2]})
        assert [g.info().index for g in found.gpus] == [2]
        found.restrict({"gpu_uuids": ["GPU-not-here"], "gpu_indices": [9]})
        assert found.gpus == [] and "none of the run's GPUs" in found.reason
    finally:
        found.close()


def test_sampler_reads_power_every_tick_and_the_rest_once_a_second(tmp_path, monkeypatch):
    mods = fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(8, "nvidia"))
    nvml = mods["pynvml"]
    with open_library("nvidia") as lib:
        devices = lib.devices()
        sampler = Sampler(devices, interval_s=0.1)
        assert sampler.full_every == 10
        calls = []
        for _ in range(10):
            nvml.CALLS.clear()
            sampler._tick()
            calls.append(sum(nvml.CALLS.values()))
    # A power tick: the instant-power field and the energy counter, per GPU.
    assert calls[1:] == [2 * 8] * 9
    assert calls[0] > 2 * 8  # the once-a-second full read
    full, fast = sampler.readings[0][0], sampler.readings[1][0]
    assert full.temperature_c is not None and full.throttle_reasons == []
    assert fast.power_w is not None and fast.energy_j is not None
    assert fast.temperature_c is None and fast.throttle_reasons is None


def test_a_mark_asks_for_a_full_read_so_short_windows_keep_their_clocks():
    """A tiny run's measured window (0.3 s, seen in CI) fell between two
    once-a-second full reads: no clocks in the window, no clocks plot."""
    class Source:
        def read(self):
            return GpuReading(power_w=100.0, sm_clock_mhz=1500.0)

        def read_power(self):
            return GpuReading(power_w=100.0)

        def energy_j(self):
            return None

    sampler = Sampler([Source()], interval_s=0.1)
    sampler._tick()  # the first, full read
    sampler._tick()
    sampler.mark("measured-start")
    sampler._tick()  # asked for by the mark
    sampler._tick()
    assert [r[0].sm_clock_mhz for r in sampler.readings] == [1500.0, None, 1500.0, None]


def test_amd_power_ticks_read_the_metrics_table_once_per_gpu(tmp_path, monkeypatch):
    mods = fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(8, "amd"))
    amdsmi = mods["amdsmi"]
    with open_library("amd") as lib:
        sampler = Sampler(lib.devices(), interval_s=0.1)
        sampler._tick()
        amdsmi.CALLS.clear()
        sampler._tick()
        assert amdsmi.CALLS == {"amdsmi_get_gpu_metrics_info": 8}
    assert sampler.readings[1][0].power_w == pytest.approx(700.0)


def test_sampler_time_stamps_ignore_a_wall_clock_step(monkeypatch):
    class Source:
        def read(self):
            return GpuReading(power_w=100.0)

        def energy_j(self):
            return None

    sampler = Sampler([Source()], interval_s=0.1)
    real = time.time
    monkeypatch.setattr(telemetry.time, "time", lambda: real() - 3600)  # NTP steps back 1 h
    sampler._tick()
    sampler._tick()
    assert 0 <= sampler.times[1] - sampler.times[0] < 5
    assert abs(sampler.times[0] - real()) < 5  # still wall-clock seconds


def test_throttle_shares_count_only_readings_that_read_them():
    series = [(0.0, GpuReading(power_w=1.0, throttle_reasons=["sw_power_cap"]))] + [
        (t / 10, GpuReading(power_w=1.0, throttle_reasons=None)) for t in range(1, 10)]
    stats = telemetry.window_stats(series)
    assert stats["throttle_reasons"] == {"sw_power_cap": 1.0}


# ---- energy counters and windows that mislead ----------------------------------------------
def _sampler(times, powers, energies, marks=()):
    s = Sampler(sources=[object()], interval_s=0.1)
    s.times = list(times)
    s.readings = [[GpuReading(power_w=p, energy_j=e)] for p, e in zip(powers, energies)]
    s.marks = [Mark(label, t, [e]) for label, t, e in marks]
    return s


def test_a_frozen_energy_counter_is_not_used():
    times = [i * 0.5 for i in range(7)]
    s = _sampler(times, [300.0] * 7, [5000.0] * 7, [("a", -0.01, 5000.0), ("b", 3.01, 5000.0)])
    energy = R.source_energy(s, 0, 0.0, 3.0)
    assert energy["used"] == "integrated" and energy["value"] == pytest.approx(900.0)
    assert "stood still" in energy["note"]


def test_a_backwards_energy_counter_is_not_used():
    times = [i * 0.5 for i in range(7)]
    counter = [0.0, 150.0, 300.0, 10.0, 160.0, 310.0, 460.0]  # a reset mid-window
    s = _sampler(times, [300.0] * 7, counter)
    energy = R.source_energy(s, 0, 0.0, 3.0)
    assert energy["used"] == "integrated" and "ran backwards" in energy["note"]


def test_a_rapl_counter_that_ran_backwards_is_flagged_and_not_used(tmp_path):
    """RAPL's energy_uj dropping by more than a plausible wrap is a backwards step:
    the unwrapped total skips it (so it stays monotonic), the reading says so, and
    the result falls back to integrated power instead of counting 0 J silently."""
    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "name").write_text("package-0\n")
    (pkg / "max_energy_range_uj").write_text("262143328850\n")
    from hpcai.measure.rapl import RaplDomain

    domain = RaplDomain(pkg)
    readings, uj = [], 5_000_000_000
    for step in range(7):
        if step == 3:
            uj = 1_000_000  # far below: no wrap at any plausible power
        else:
            uj += 150_000_000  # 150 J a step
        (pkg / "energy_uj").write_text(f"{uj}\n")
        readings.append(domain.read())
    assert [r.counter_backwards for r in readings] == [False, False, False, True, False, False, False]
    assert all(b.energy_j >= a.energy_j for a, b in zip(readings, readings[1:]))
    s = Sampler(sources=[object()], interval_s=0.1)
    s.times = [i * 0.5 for i in range(7)]
    s.readings = [[r if r.power_w is not None else GpuReading(power_w=300.0, energy_j=r.energy_j,
                                                               counter_backwards=r.counter_backwards)]
                  for r in readings]
    s.marks = []
    energy = R.source_energy(s, 0, 0.0, 3.0)
    assert energy["used"] == "integrated" and "ran backwards" in energy["note"]


def test_short_windows_and_missing_power_samples_are_flagged(tmp_path, monkeypatch, result_schema):
    import jsonschema

    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    found = power_sources.discover("auto")
    try:
        times = [i * 0.1 for i in range(5)]  # 5 samples over a 2 s window at 100 ms
        s = _sampler(times, [300.0] * 5, [i * 30.0 for i in range(5)])
        spec = {"power": {"node_overhead_w": 100.0}, "devices": {"gpu_indices": [0]},
                "protocol": {"telemetry": True}}
        gpus, _, power = R.power_section(spec, found, s, (0.0, 2.0), 10)
    finally:
        found.close()
    quality = power["quality"]
    assert quality == {"min_window_s": 10.0, "window_short": True, "power_samples_expected": 20,
                       "power_samples_min": 5, "samples_short": True}
    assert any("shorter than 10 s" in n for n in power["notes"])
    assert any("only 5 power samples" in n for n in power["notes"])
    schema = {**result_schema["properties"]["power"], "$defs": result_schema["$defs"]}
    jsonschema.validate(power, schema)


def test_info_lists_the_gpus_this_job_may_not_open(tmp_path):
    devices = fgs.make_devices(3, "nvidia")
    devices[1]["inaccessible"] = "no_permission"
    node = FakeNode(tmp_path, devices)
    done = node.launch("info", "--json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert [g["index"] for g in facts["gpus"]] == [0, 2]
    assert facts["inaccessible_gpus"] == [{"index": 1, "reason": "Insufficient Permissions"}]


def test_the_result_records_requested_applied_and_enforced_limits(result_schema):
    from hpcai.launcher.run.results import apply_limits

    doc = {"gpus": [{"index": 0, "used": True, "power_w": {"median": 290.0}}], "power": {}}
    limits = {0: {"default_w": 700.0, "min_w": 200.0, "max_w": 700.0, "requested_w": 300.0,
                  "applied_w": 300.0, "enforced_w": 300.0}}
    apply_limits(doc, limits, 300.0, 0.05)
    assert doc["gpus"][0]["limits"]["enforced_w"] == 300.0
    assert "enforced_w" in result_schema["$defs"]["limits"]["properties"]


def test_a_cap_with_no_gpu_visible_to_the_job_is_one_line(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(2, "nvidia"))
    node.env["CUDA_VISIBLE_DEVICES"] = "NoDevFiles"
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "300",
                       "-o", str(node.results))
    one_line_error(done, "none of this node's GPUs is visible", "CUDA_VISIBLE_DEVICES")
    assert all(d["set_log"] == [] for d in node.devices()) and node.journal_files() == []
