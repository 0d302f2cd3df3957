"""The declared measurement tier (issue 44 §3): the self-test's meter check
against the node's meter, the root-owned calibration it stores, and the tier
hpcai.measure.tier gives results from it.

FAKE NVML (tests/fakes) for the GPUs. The node meter is HPE Cray pm_counters
(the real PmCountersSource) over files in a temp folder: node power = the fake
GPUs' draw x (1 + skew) + a fixed non-GPU part, "<value> <unit> <timestamp> us"
(Cray-HPE docs-csm, operations/power_management/User_Access_to_Compute_Node_Power_Data.md).
The load child is a stand-in that raises the fake GPU's draw and the meter's
reading, as the real matrix-multiply child raises a real GPU's and the node's."""
from __future__ import annotations

import datetime as dt
import json
import os
import stat
from pathlib import Path

import pytest

from hpcai.errors import ConfigError
from hpcai.launcher.site import config as sites
from hpcai.launcher.selftest import load as load_mod
from hpcai.launcher.selftest import run_selftest
from hpcai.launcher.site import tier as LT
from hpcai.measure import tier as T

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)
from test_sites import clean_env, no_gpu  # noqa: F401 (fixtures)

TESTS = Path(__file__).resolve().parents[1]
OFFSET_W = 150.0  # the node's non-GPU part
IDLE_W, LOADED_W = 80.0, 400.0
LOAD_CHILD = """import os, sys, time
sys.path.insert(0, {tests!r})
from fakes import fake_gpu_state as fgs
fgs.update_device(fgs.state_path(), 0, power_draw_w={loaded})
open({meter!r} + ".tmp", "w").write("{node_w:.1f} W 1700000000000000 us\\n")
os.replace({meter!r} + ".tmp", {meter!r})
print("ready", flush=True)
time.sleep(600)
"""


def node_w(gpu_w: float, skew: float) -> float:
    """What the node's meter reads: the GPUs (off by skew) and the rest."""
    return gpu_w * (1 + skew) + OFFSET_W


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A fake GPU node with a pm_counters meter; returns a function running the meter check.
    The meter has a power file only (pm_counters' energy file is optional: the window's
    node energy is then its integrated power), written when the GPU's draw changes: by
    the test idle, by the stand-in load child under load, so it never lags the GPU."""
    state = tmp_path / "gpus.json"
    fgs.install(monkeypatch, state, fgs.make_devices(1, "nvidia", power_draw_w=IDLE_W))
    monkeypatch.chdir(tmp_path)

    def run(skew: float = 0.0, extra: str = "", stale: bool = False) -> tuple[dict, list]:
        fgs.update_device(state, 0, power_draw_w=IDLE_W)
        meter = tmp_path / f"pm-{skew}"
        meter.mkdir()
        (meter / "power").write_text(f"{node_w(IDLE_W, skew):.1f} W 1700000000000000 us\n")
        if stale:  # a controller that stopped: freshness stands still
            (meter / "freshness").write_text("1000\n")
        monkeypatch.setattr(load_mod, "_CHILD", LOAD_CHILD.format(
            tests=str(TESTS), loaded=LOADED_W, meter=str(meter / "power"), node_w=node_w(LOADED_W, skew)))
        site = write_site(tmp_path, meter, extra)
        out = tmp_path / "selftest.json"
        run_selftest(site_selector=str(site), only=["meter"], load=True, load_s=1.0,
                     output=str(out), journal=str(tmp_path / "journal.json"))
        return sites.load(str(site)), json.loads(out.read_text())["checks"]

    return run


def write_site(tmp_path: Path, pm_root: Path, extra: str = "") -> Path:
    site = tmp_path / "site.toml"
    site.write_text(f'name = "tiertest"\n[node_power]\nsources = ["pm_counters"]\n'
                    f'calibration_file = "{tmp_path}/state/calibration.json"\n{extra}'
                    f'[node_power.pm_counters]\nroot = "{pm_root}"\ninterval_s = 0.1\n')
    return site


def _row(rows: list, item: str) -> dict:
    return next(r for r in rows if r["item"] == item)


def test_the_meter_check_stores_a_calibration_that_makes_results_node_meter(node):
    site, rows = node()
    meter = _row(rows, "node meter")
    assert meter["status"] == "ok", meter["value"]
    assert abs(meter["detail"]["offset_w"] - OFFSET_W) < 15
    assert meter["detail"]["agreement_within_frac"] < 0.02
    gpu = _row(rows, "GPU 0 counter")["detail"]
    assert abs(gpu["idle"] - IDLE_W) < 5 and abs(gpu["loaded"] - LOADED_W) < 5
    path = T.calibration_path(site)
    st = os.lstat(path)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    assert "pm_counters" in json.loads(path.read_text())["meter_api"]
    assert _row(rows, "calibration")["value"] == f"stored at {path}: tier node-meter"
    tier = LT.current_tier(site)
    assert tier["tier"] == "node-meter" and tier["reason"] is None
    assert tier["agreement_within_frac"] == meter["detail"]["agreement_within_frac"]
    assert tier["stated_agreement_frac"] == T.DEFAULT_AGREEMENT_FRAC


def test_a_meter_that_disagrees_keeps_the_tier_at_counter_and_says_by_how_much(node):
    site, rows = node(skew=0.25)
    meter = _row(rows, "node meter")
    # idle offset 80 x 1.25 + 150 - 80 = 170 W; loaded: the meter sees 650 - 170 = 480 W of GPU,
    # the counters 400 W: 80 / 480 = 16.7 %.
    assert meter["status"] == "warn"
    assert meter["detail"]["agreement_within_frac"] == pytest.approx(80 / 480, abs=0.03)
    assert "tier counter (counters and meter differed by" in _row(rows, "calibration")["value"]
    tier = LT.current_tier(site)
    assert tier["tier"] == "counter" and "more than the stated 5.0%" in tier["reason"]


def test_a_meter_that_stops_updating_fails_the_check_with_the_reason_and_stores_nothing(node):
    site, rows = node(stale=True)
    meter = _row(rows, "node meter")
    assert meter["status"] == "FAIL" and "freshness did not advance" in meter["value"]
    assert not LT.read_calibration(site)[0] and LT.current_tier(site)["tier"] == "counter"


def test_the_stated_agreement_comes_from_the_site(node):
    site, _ = node(skew=0.25, extra="agreement_frac = 0.4\n")
    assert LT.current_tier(site)["tier"] == "node-meter"


def test_without_a_node_meter_the_check_is_skipped_and_the_tier_is_counter(tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "selftest.json"
    run_selftest(site_selector="default", only=["meter"], load=False, load_s=0.5, output=str(out),
                 journal=str(tmp_path / "journal.json"))
    (row,) = json.loads(out.read_text())["checks"]
    assert row["status"] == "skipped" and "no node meter" in row["value"]


# ---- the calibration file and the tier (no selftest run) ------------------------------
def _calibration(host: str | None = None, agreement: float = 0.02, days_ago: float = 1.0) -> dict:
    idle = T.Phase([100.0], 250.0, 1.0)
    loaded = T.Phase([400.0], 550.0, 1.0)
    doc = T.calibrate(idle, loaded, "HPE Cray pm_counters sysfs (pm_counters/node)",
                      dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_ago))
    doc["agreement_within_frac"] = agreement
    if host is not None:
        doc["host"] = host
    return doc


def test_calibrate_measures_the_offset_idle_and_the_agreement_loaded():
    doc = T.calibrate(T.Phase([100.0, 100.0], 500.0, 2.0), T.Phase([800.0, 800.0], 1300.0, 2.0), "m")
    assert doc["offset_w"] == pytest.approx(150.0)  # 250 W node - 100 W GPUs
    # loaded: meter 650 W - 150 W offset = 500 W for the GPUs, counters 800 W.
    assert doc["agreement_within_frac"] == pytest.approx(300 / 500)
    flat = T.calibrate(T.Phase([100.0], 250.0, 1.0), T.Phase([400.0], 250.0, 1.0), "m")
    assert flat["agreement_within_frac"] is None  # the load never reached the meter


def test_an_old_calibration_no_longer_counts(tmp_path):
    config = {"calibration_file": str(tmp_path / "c.json"), "max_calibration_age_days": 7}
    LT.store_calibration(config, _calibration(days_ago=8))
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and "8 days old, more than 7" in tier["reason"]
    assert LT.current_tier(dict(config, max_calibration_age_days=9))["tier"] == "node-meter"


def test_another_nodes_calibration_does_not_count(tmp_path):
    config = {"calibration_file": str(tmp_path / "c.json")}
    LT.store_calibration(config, _calibration(host="some-other-node"))
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and "'some-other-node'" in tier["reason"]


def test_a_calibration_others_can_write_or_a_link_is_not_believed(tmp_path):
    config = {"calibration_file": str(tmp_path / "c.json")}
    path = LT.store_calibration(config, _calibration())
    assert LT.current_tier(config)["tier"] == "node-meter"
    os.chmod(path, 0o666)
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and "written by other users" in tier["reason"]
    path.unlink()
    real = tmp_path / "elsewhere.json"
    real.write_text(json.dumps(_calibration()))
    path.symlink_to(real)
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and "symbolic link" in tier["reason"]


def test_a_calibration_root_does_not_own_with_its_folders_is_not_believed(tmp_path):
    # Root alone may grant the node's tier: a file, or a folder above it, of another
    # user (these tests run as root; 65534 is nobody) is not believed.
    folder = tmp_path / "state"
    folder.mkdir(mode=0o755)
    config = {"calibration_file": str(folder / "c.json")}
    path = LT.store_calibration(config, _calibration())
    os.chown(folder, 65534, 65534)
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and f"{folder} belongs to uid 65534, not to you" in tier["reason"]
    os.chown(folder, 0, 0)
    os.chown(path, 65534, 65534)
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and f"{path} belongs to uid 65534" in tier["reason"]


def test_storing_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    link = tmp_path / "c.json"
    link.symlink_to(victim)
    LT.store_calibration({"calibration_file": str(link)}, _calibration())
    assert victim.read_text() == "keep me\n"
    assert not link.is_symlink() and json.loads(link.read_text())["kind"] == T.CALIBRATION_KIND


def test_a_missing_calibration_is_tier_counter_with_the_way_to_make_one(tmp_path):
    tier = LT.current_tier({"calibration_file": str(tmp_path / "none.json")})
    assert tier["tier"] == "counter" and "selftest --only meter" in tier["reason"]


def test_a_declared_analyzer_is_tier_analyzer_with_its_agreement(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('name = "lab"\n[node_power.analyzer]\nname = "Yokogawa WT333E on the PDU feed"\n'
                    "agreement_frac = 0.005\n")
    tier = LT.current_tier(sites.load(str(site)))
    assert tier["tier"] == "analyzer" and tier["agreement_within_frac"] == 0.005
    assert tier["meter_api"] == "Yokogawa WT333E on the PDU feed"


@pytest.mark.parametrize("line", ["agreement_frac = nan", "agreement_frac = 1.5",
                                  "max_calibration_age_days = inf"])
def test_bad_tier_settings_are_one_line_config_errors(tmp_path, line):
    site = tmp_path / "site.toml"
    site.write_text(f'name = "bad"\n[node_power]\n{line}\n')
    with pytest.raises(ConfigError, match="node_power"):
        sites.load(str(site))


# ---- the tier in the result -----------------------------------------------------------
def _result_power(tmp_path, monkeypatch, node_power: dict) -> dict:
    from test_node_power_result import gpu_sampler

    from hpcai.measure import power_sources
    from hpcai.workloads import result as R

    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    spec = {"power": {"node_overhead_w": 100.0}, "devices": {"gpu_indices": [0]},
            "protocol": {"telemetry": True}, "node_power": node_power}
    found = power_sources.discover("auto")
    try:
        return R.power_section(spec, found, gpu_sampler(0.0, 12), (1.0, 11.0), 1000)[2]
    finally:
        found.close()


def test_every_result_carries_its_tier_and_the_schema_takes_it(tmp_path, monkeypatch, result_schema):
    import jsonschema

    schema = {**result_schema["properties"]["power"], "$defs": result_schema["$defs"]}
    config = {"sources": ["pm_counters"], "calibration_file": str(tmp_path / "c.json")}
    bare = _result_power(tmp_path, monkeypatch, config)
    assert bare["tier"]["tier"] == "counter" and "no calibration" in bare["tier"]["reason"]
    jsonschema.validate(bare, schema)
    LT.store_calibration(config, _calibration(agreement=0.02))
    calibrated = _result_power(tmp_path, monkeypatch, config)["tier"]
    assert calibrated["tier"] == "node-meter" and calibrated["agreement_within_frac"] == 0.02
    jsonschema.validate(dict(bare, tier=calibrated), schema)
    bad = dict(bare, tier=dict(calibrated, tier="guessed"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_only_root_stores_a_calibration(tmp_path, monkeypatch):
    from hpcai.errors import PowerPermissionError

    monkeypatch.setattr(LT.os, "geteuid", lambda: 1000)
    config = {"calibration_file": str(tmp_path / "c.json")}
    with pytest.raises(PowerPermissionError, match="root's state and this is uid 1000"):
        LT.store_calibration(config, _calibration())
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("change, reason", [
    ({"offset_w": -40.0}, "does not cover these GPUs"),
    ({"date": "2026-11-20T10:00:00"}, "no readable date with a time zone"),
    ({"agreement_within_frac": float("nan")}, "found no agreement"),
])
def test_a_calibration_that_cannot_hold_keeps_the_tier_at_counter(tmp_path, change, reason):
    config = {"calibration_file": str(tmp_path / "c.json")}
    LT.store_calibration(config, dict(_calibration(), **change))
    tier = LT.current_tier(config)
    assert tier["tier"] == "counter" and reason in tier["reason"]


def test_a_multi_node_aggregate_stands_on_its_weakest_nodes_tier(tmp_path):
    from test_slurm_aggregate import result, two_node_job, write

    from hpcai.launcher.slurm import aggregate
    from hpcai.launcher.slurm.job import node_dir

    job = two_node_job(tmp_path)
    run_id = job.runs[0].run_id
    for rank, tier in ((0, "node-meter"), (1, "counter")):
        doc = result(80.0)
        doc["power"]["tier"] = T.tier_of({}, None, "x") | {"tier": tier}
        write(node_dir(job.folder, run_id, rank) / "result.json", doc)
    power = aggregate.aggregate(job, 0)["power"]
    assert power["tier"] == "counter" and power["tiers"] == ["counter", "node-meter"]
    write(node_dir(job.folder, run_id, 1) / "result.json", result(80.0))  # no tier: before 1.1
    power = aggregate.aggregate(job, 0)["power"]
    assert power["tier"] == "unstated" and power["tiers"] == ["unstated", "node-meter"]


@pytest.mark.usefixtures("clean_env", "no_gpu")
def test_site_check_says_the_nodes_tier_and_warns_of_an_uncalibrated_meter(tmp_path):
    from test_node_power import pm_tree
    from test_sites import check_lines, invoke

    pm = pm_tree(tmp_path / "pm", accels=1)
    site = write_site(tmp_path, pm)
    done = invoke("site", "check", "--site", str(site))
    assert check_lines(done)["measurement tier"] == "warn"
    assert "counter (no calibration at" in done.stdout
    LT.store_calibration(sites.load(str(site)), _calibration(agreement=0.02))
    done = invoke("site", "check", "--site", str(site))
    assert check_lines(done)["measurement tier"] == "ok"
    assert "node-meter, agreement within 2.0%" in done.stdout


# ---- the tier a launched run keeps ----------------------------------------------------
def _in_a_user_namespace(config: dict) -> dict:
    """current_tier as a workload in an unprivileged user namespace reads it (Apptainer's
    default mode since 1.1): a real one (`unshare --user`, root left unmapped), where
    root's files show as uid 65534. Checked with Apptainer 1.4.5 run unprivileged on
    these machines: a bound root-owned file shows as `65534 nobody` inside."""
    import subprocess
    import sys

    code = ("import json, sys; from hpcai.launcher.site.tier import current_tier; "
            "print(json.dumps(current_tier(json.loads(sys.argv[1]))))")
    done = subprocess.run(["unshare", "--user", sys.executable, "-c", code, json.dumps(config)],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def _launched_result(tmp_path, config: dict, workload_tier: dict) -> dict:
    """A result as the launcher completes it (process.finish_result), from a workload
    that judged workload_tier."""
    from hpcai.launcher.run.process import finish_result, placeholder_result
    from hpcai.launcher.run.runtime import HOST
    from hpcai.launcher.run.spec import build_spec
    from hpcai.workloads.catalog import get_workload

    spec = build_spec(get_workload("resnet50"), "tiny", impl="pytorch", overrides={},
                      protocol_overrides={}, device_type="cpu", vendor=None, nproc=1,
                      gpu_indices=None, cap_w=None, power_method="auto", cap_tolerance_frac=0.05,
                      node_overhead_w=100.0, site={"name": "default"}, output_dir=str(tmp_path),
                      runtime=dict(HOST)).at_site(config, {})
    doc = placeholder_result(spec)
    doc["power"]["tier"] = workload_tier
    return finish_result(doc, tmp_path, spec, 0, {})


def test_the_launcher_judges_the_tier_on_the_host_where_roots_calibration_is_roots(tmp_path):
    config = {"calibration_file": str(tmp_path / "state" / "c.json")}
    LT.store_calibration(config, _calibration(agreement=0.02))
    inside = _in_a_user_namespace(config)  # what the workload itself wrote
    assert inside["tier"] == "counter" and "belongs to uid 65534" in inside["reason"]
    kept = _launched_result(tmp_path, config, inside)["power"]["tier"]
    assert kept["tier"] == "node-meter" and kept["agreement_within_frac"] == 0.02


def test_a_workload_cannot_claim_a_tier_the_node_has_not(tmp_path):
    config = {"calibration_file": str(tmp_path / "none.json")}
    claimed = dict(T.tier_of({}, _calibration(), None), tier="node-meter")
    kept = _launched_result(tmp_path, config, claimed)["power"]["tier"]
    assert kept["tier"] == "counter" and "no calibration" in kept["reason"]
