"""Node power sources (RAPL, HPE Cray pm_counters): read from sysfs-shaped
fixture trees (the kernel's file boundary), faults become reasons, and the
window's energy comes from the counter."""
import time
from pathlib import Path

import pytest

from hpcai.measure import node_power as NP
from hpcai.measure.source import Channel, PowerSource, Sample

RAPL_RANGE = 262143328850  # a real package's max_energy_range_uj


def rapl_tree(root: Path, packages=2, dram=True) -> Path:
    for p in range(packages):
        zone = root / f"intel-rapl:{p}"
        zone.mkdir(parents=True)
        (zone / "name").write_text(f"package-{p}\n")
        (zone / "max_energy_range_uj").write_text(f"{RAPL_RANGE}\n")
        (zone / "energy_uj").write_text("1000000\n")
        if dram:
            sub = root / f"intel-rapl:{p}:0"  # the kernel lists sub-zones beside packages too
            sub.mkdir()
            (sub / "name").write_text("dram\n")
            (sub / "max_energy_range_uj").write_text("65712999613\n")
            (sub / "energy_uj").write_text("500000\n")
        core = root / f"intel-rapl:{p}:1"
        if not core.exists():
            core.mkdir()
            (core / "name").write_text("core\n")
            (core / "max_energy_range_uj").write_text(f"{RAPL_RANGE}\n")
            (core / "energy_uj").write_text("0\n")
    return root


def set_uj(root: Path, zone: str, uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{uj}\n")


def pm_tree(root: Path, accels=2) -> Path:
    root.mkdir(parents=True)
    files = {"power": "600 W", "energy": "100000 J", "cpu_power": "150 W",
             "cpu_energy": "30000 J", "memory_power": "40 W", "memory_energy": "8000 J",
             "freshness": "1000", "raw_scan_hz": "10", "version": "2", "startup": "1"}
    for a in range(accels):
        files[f"accel{a}_power"] = "200 W"
        files[f"accel{a}_energy"] = "20000 J"
    for name, value in files.items():
        stamp = "" if name in ("freshness", "raw_scan_hz", "version", "startup") else " 1700000000000000 us"
        (root / name).write_text(value + stamp + "\n")
    return root


def pm_set(root: Path, name: str, value: str) -> None:
    (root / name).write_text(f"{value} 1700000000000000 us\n")


def test_rapl_finds_packages_and_dram_not_core(tmp_path):
    source = NP.RaplSource(rapl_tree(tmp_path / "powercap"))
    scopes = {c.name: c.scope for c in source.channels}
    assert scopes == {"package-0": "cpu_package", "package-1": "cpu_package",
                      "dram-0": "dram", "dram-1": "dram"}


def test_rapl_counter_wraps_at_max_energy_range(tmp_path):
    root = rapl_tree(tmp_path / "powercap", packages=1, dram=False)
    set_uj(root, "intel-rapl:0", RAPL_RANGE - 2_000_000)
    source = NP.RaplSource(root)
    source.read()
    set_uj(root, "intel-rapl:0", 3_000_000)  # wrapped: 2 J before the top, 3 J after
    time.sleep(0.02)
    sample = source.read()
    assert sample.energy_j["package-0"] == pytest.approx(5.0)
    assert not source.backwards


def test_rapl_counter_backwards_is_not_a_wrap(tmp_path):
    root = rapl_tree(tmp_path / "powercap", packages=1, dram=False)
    set_uj(root, "intel-rapl:0", 50_000_000)
    run = NP.SourceRun(NP.RaplSource(root, max_power_w=1000), interval_s=1.0)
    run.tick()
    set_uj(root, "intel-rapl:0", 40_000_000)  # a wrap would mean ~262 kJ in ms: absurd
    run.tick()
    assert run.samples[-1].energy_j["package-0"] == 0.0
    assert any("went backwards" in r for r in run.faults)


def test_rapl_unreadable_root_and_missing_tree_are_reasons(tmp_path):
    with pytest.raises(NP.SourceError, match="does not exist"):
        NP.RaplSource(tmp_path / "nothing")
    runs, status = NP.open_sources({"sources": ["rapl"], "rapl": {"root": str(tmp_path / "x")}})
    assert runs == [] and status[0]["status"] == "unavailable"


def test_real_rapl_when_this_machine_has_it():
    root = Path("/sys/class/powercap")
    try:
        source = NP.RaplSource(root)
    except NP.SourceError as exc:
        pytest.skip(f"this machine exposes no readable RAPL: {exc}")
    first = source.read()
    time.sleep(0.2)
    second = source.read()
    for ch in source.channels:
        assert second.energy_j[ch.name] >= first.energy_j[ch.name]


def test_pm_counters_channels_and_scopes(tmp_path):
    source = NP.PmCountersSource(pm_tree(tmp_path / "pm"))
    scopes = {c.name: c.scope for c in source.channels}
    assert scopes == {"node": "node", "cpu": "cpu_package", "memory": "dram",
                      "accel0": "accelerator", "accel1": "accelerator"}
    sample = source.read()
    assert sample.power_w["node"] == 600.0 and sample.energy_j["node"] == 0.0
    pm_set(tmp_path / "pm", "energy", "100600 J")
    (tmp_path / "pm" / "freshness").write_text("1010\n")
    assert source.read().energy_j["node"] == 600.0


def test_pm_counters_stale_freshness_is_a_reason(tmp_path):
    root = pm_tree(tmp_path / "pm")
    run = NP.SourceRun(NP.PmCountersSource(root), interval_s=1.0)
    run.tick()
    time.sleep(0.55)
    run.tick()  # freshness still 1000 after > 0.5 s
    assert any("freshness did not advance" in r for r in run.faults)
    assert len(run.samples) == 1


def test_zero_and_absurd_power_rejected(tmp_path):
    root = pm_tree(tmp_path / "pm", accels=0)
    run = NP.SourceRun(NP.PmCountersSource(root, max_power_w=5000), interval_s=1.0)
    pm_set(root, "power", "0 W")
    run.tick()
    (root / "freshness").write_text("1001\n")
    pm_set(root, "power", "99999 W")
    run.tick()
    assert run.samples[0].power_w["node"] is None and run.samples[1].power_w["node"] is None
    assert any("0 W rejected" in r for r in run.faults)
    assert any("absurd power 99999" in r for r in run.faults)


def test_pm_energy_counter_backwards_falls_back_to_power(tmp_path):
    root = pm_tree(tmp_path / "pm", accels=0)
    run = NP.SourceRun(NP.PmCountersSource(root), interval_s=1.0)
    run.tick()
    (root / "freshness").write_text("1001\n")
    pm_set(root, "energy", "90000 J")
    run.tick()
    assert any("node: energy counter went backwards" in r for r in run.faults)
    for i, s in enumerate(run.samples):
        s.t = 100.0 + 10 * i
    out = NP._channel_window(run, "node", [s.t for s in run.samples], (100.0, 110.0))
    assert out["energy_basis"] == "integrated power"
    assert out["energy_j"] == pytest.approx(6000.0)


def test_window_energy_from_counter_interpolated(tmp_path):
    run = NP.SourceRun(object(), interval_s=1.0)
    run.samples = [Sample(float(t), {"node": 500.0}, {"node": 500.0 * t}) for t in range(11)]
    out = NP._channel_window(run, "node", [s.t for s in run.samples], (2.5, 7.5))
    assert out["energy_basis"] == "energy counter"
    assert out["energy_j"] == pytest.approx(2500.0)
    assert out["mean_power_w"] == pytest.approx(500.0)


class HungSource(PowerSource):
    kind, api, channels, max_power_w = "ipmi", "test", [Channel("node", "node")], 1e4

    def read(self):
        time.sleep(3)
        return Sample(time.monotonic(), {"node": 100.0}, {"node": None})


def test_hung_source_does_not_hold_up_stop():
    run = NP.SourceRun(HungSource(), interval_s=1.0)
    run.start()
    time.sleep(0.05)
    start = time.monotonic()
    run.stop(timeout_s=0.2)
    assert time.monotonic() - start < 1.0
    assert any("hung source" in r for r in run.faults)


def test_sampler_summary_and_node_overhead(tmp_path):
    root = pm_tree(tmp_path / "pm", accels=1)
    sampler = NP.NodePowerSampler({"sources": ["auto"], "rapl": {"root": str(tmp_path / "none")},
                                   "pm_counters": {"root": str(root), "interval_s": 0.1}})
    assert [r.source.kind for r in sampler.runs] == ["pm_counters"]
    assert sampler.status[0] == {"source": "rapl", "status": "absent",
                                 "detail": f"{tmp_path / 'none'} does not exist (no Linux powercap driver)"}
    run = sampler.runs[0]
    for i in range(6):  # a counter at 600 W, read every second
        (root / "freshness").write_text(f"{1000 + i}\n")
        pm_set(root, "energy", f"{100000 + 600 * i} J")
        run.tick()
        run.samples[-1].t = sampler._mono0 + i
    w0 = sampler.wall(sampler._mono0)
    summary = sampler.summary((w0 + 1, w0 + 4))
    node = next(e for e in summary["sources"] if e["channel"] == "node")
    assert node["energy_j"] == pytest.approx(1800.0) and node["boundary"] == "node"
    assert node["api"] == "HPE Cray pm_counters sysfs"
    section = NP.node_section(summary, gpu_energy_j=1200.0, window_s=3.0)
    assert section["measured_overhead_w"] == pytest.approx(200.0)
    assert NP.energy_with_node(section, 1200.0, 100.0, 3.0) == (
        pytest.approx(1800.0), "measured (pm_counters/node)")
    assert NP.energy_with_node(None, 1200.0, 100.0, 3.0) == (
        pytest.approx(1500.0), "fixed overhead (100 W per node)")


def test_sources_run_in_their_own_threads_at_their_rate(tmp_path):
    root = rapl_tree(tmp_path / "powercap", packages=1, dram=False)
    sampler = NP.NodePowerSampler({"sources": ["rapl"], "rapl": {"root": str(root),
                                                                   "interval_s": 0.1}})
    sampler.start()
    time.sleep(0.45)
    sampler.stop()
    assert 2 <= len(sampler.runs[0].samples) <= 8
