"""Per-job energy receipts (launcher/receipts/) on FAKE GPUs (tests/fakes/pynvml.py):
the prolog's and epilog's halves, the spool's checks, the store's tables, the mix.
Slurm's part (scontrol, the prolog and epilog themselves) runs on the real
two-node Slurm in tests/integration/test_job_receipts_slurm.py."""
from __future__ import annotations

import json
import os
import time

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.errors import ConfigError, UsageError
from hpcai.launcher.power import authority
from hpcai.launcher.receipts import record, slurm, spool


@pytest.fixture
def gpus(tmp_path, monkeypatch):
    path = tmp_path / "gpus.json"
    fgs.install(monkeypatch, path, fgs.make_devices(4, "nvidia"))
    yield path
    for device in fgs.read_state(path)["devices"]:
        for leftover in ("lock", "holder.json", "original.json", "job.json"):
            (record.gpu_reads.LOCK_ROOT / f"gpu-{device['uuid']}.{leftover}").unlink(missing_ok=True)


@pytest.fixture
def site(tmp_path):
    folder = tmp_path / "spool"
    return {"receipts": {"spool": str(folder)}}


def job(job_id="4242", indices=frozenset({0, 1}), **changes) -> dict:
    """The facts slurm.job_here returns for a job (its parsing is tested below and on real Slurm)."""
    facts = {"job_id": job_id, "node": "node1", "user": "alice", "uid": 1001, "account": "ml-team",
             "partition": "gpu", "job_name": "llama-pretrain", "qos": "normal", "restarts": 0,
             "slurm_state": "COMPLETING", "exit_code": "0:0", "end_state": "completed",
             "gpu_indices": set(indices)}
    facts.update(changes)
    return facts


def advance_energy(state, joules: dict[int, float]) -> None:
    """The counters move on as if the GPUs drew power meanwhile (the fake folds energy in mJ)."""
    for index, added in joules.items():
        device = fgs.read_state(state)["devices"][index]
        fgs.update_device(state, index, energy_mj=device["energy_mj"] + added * 1000.0,
                          energy_t=device["energy_t"])


def test_a_receipt_gives_each_gpus_energy_from_its_counters(gpus, site):
    record.begin(job(), site)
    folder = spool.spool_path(site)
    assert [p.name for p in folder.iterdir()] == ["4242.0.node1.start.json"]
    advance_energy(gpus, {0: 5000.0, 1: 7000.0})
    line = record.finish(job(), site)
    assert "receipt for job 4242 (completed): 2 GPU(s)" in line
    receipt = json.loads((folder / "4242.0.node1.json").read_text())
    assert not (folder / "4242.0.node1.start.json").exists()
    devices = fgs.read_state(gpus)["devices"]
    assert [g["uuid"] for g in receipt["gpus"]] == [devices[0]["uuid"], devices[1]["uuid"]]
    for g in receipt["gpus"]:
        assert g["energy_method"] == "counter"
        assert g["energy_j"] == pytest.approx(g["energy_end_j"] - g["energy_start_j"])
    # The fake's counter also grows with wall time at its reported power: at least what was added.
    assert receipt["gpus"][0]["energy_j"] >= 5000.0 and receipt["gpus"][1]["energy_j"] >= 7000.0
    assert receipt["gpus"][1]["energy_j"] - receipt["gpus"][0]["energy_j"] == pytest.approx(2000.0, abs=50)
    assert receipt["gpus"][0]["cap_w"] == 700.0 and receipt["gpus"][0]["cap_set_by"] == "default"
    assert receipt["gpus"][0]["model"] == "H100"
    assert receipt["gpus"][0]["sm_clock_mhz"] == 1980.0
    assert receipt["user"] == "alice" and receipt["partition"] == "gpu" and receipt["gpu_count"] == 2
    assert receipt["lost_gpus"] == [] and receipt["problems"] == []
    assert oct(os.stat(folder / "4242.0.node1.json").st_mode & 0o777) == "0o644"


def test_a_gpu_lost_mid_job_is_named_and_its_counter_is_not_made_up(gpus, site):
    record.begin(job(), site)
    fgs.update_device(gpus, 1, inaccessible="gpu_is_lost")  # NVML: GPU_IS_LOST on its handle
    record.finish(job(end_state="killed", exit_code="0:9"), site)
    receipt = json.loads((spool.spool_path(site) / "4242.0.node1.json").read_text())
    lost_uuid = fgs.read_state(gpus)["devices"][1]["uuid"]
    assert receipt["lost_gpus"] == [lost_uuid] and receipt["state"] == "killed"
    lost = [g for g in receipt["gpus"] if g["uuid"] == lost_uuid][0]
    assert lost["lost"] is True and lost["energy_j"] is None and lost["energy_end_j"] is None
    assert "GPU 1 unreadable at the end" in receipt["problems"][0]


def test_a_counter_that_went_backwards_gives_the_two_point_power_estimate(gpus, site):
    record.begin(job(indices={0}), site)
    fgs.update_device(gpus, 0, energy_mj=0.0, energy_t=time.time())  # a driver reload resets it
    record.finish(job(indices={0}), site)
    g = json.loads((spool.spool_path(site) / "4242.0.node1.json").read_text())["gpus"][0]
    assert g["energy_method"] == "two-point-power"
    assert g["energy_end_j"] < g["energy_start_j"]
    assert g["energy_j"] is not None and g["energy_j"] >= 0
    # The estimate itself: the mean of the two power readings times the time between them.
    assert record.gpu_reads.energy_over_job({"energy_j": 900.0, "power_w": 300.0, "t": 100.0},
                                            {"energy_j": 10.0, "power_w": 500.0, "t": 160.0}) \
        == (24000.0, "two-point-power")
    assert record.gpu_reads.energy_over_job({"energy_j": None, "power_w": None, "t": 100.0},
                                            {"energy_j": None, "power_w": 500.0, "t": 160.0}) == (None, None)


def test_the_cap_names_who_set_it(gpus, site, tmp_path):
    uuid = fgs.read_state(gpus)["devices"][0]["uuid"]
    assert record.gpu_reads.cap_set_by(uuid, 700.0, 700.0, "4242", None) == "default"
    assert record.gpu_reads.cap_set_by(uuid, 450.0, 700.0, "4242", 450.0) == "policy"
    assert record.gpu_reads.cap_set_by(uuid, 300.0, 700.0, "4242", 450.0) == "someone else"
    root = tmp_path / "authority"
    root.mkdir(mode=0o700)
    # The job's own user through hpcai-power-helper leaves the job's record (power/helper.py).
    authority.write_private_json(root / f"gpu-{uuid}.job.json", {"job_id": "4242", "uid": 1001})
    assert record.gpu_reads.cap_set_by(uuid, 300.0, 700.0, "4242", None, root=root) == "job"
    assert record.gpu_reads.cap_set_by(uuid, 300.0, 700.0, "99", None, root=root) == "someone else"
    # A running hpcai launcher holds the GPU's lock.
    with authority.GpuAuthority([uuid], "run-abc", root=root):
        assert record.gpu_reads.cap_set_by(uuid, 300.0, 700.0, "99", None, root=root) == "hpcai run run-abc"
        assert record.gpu_reads.clocks_set_by(uuid, root=root) == "hpcai run run-abc"
    assert record.gpu_reads.clocks_set_by(uuid, root=root) == "not hpcai"


def test_policy_cap_reads_the_partitions_default_per_gpu_model():
    site_raw = {"policy": {"default": [{"partition": "gpu", "gpu": "H100", "cap_w": 450.0},
                                       {"partition": "debug", "gpu": "H100", "cap_w": 600.0}]}}
    assert record.policy_cap(site_raw, "gpu", "H100") == 450.0
    assert record.policy_cap(site_raw, "gpu", "A100") is None


@pytest.mark.parametrize("bad", ["42\n", "42\x1b[31m", "../42", "", "42;rm"])
def test_a_hostile_job_id_is_one_line_and_writes_nothing(bad, tmp_path, capsys):
    from hpcai.launcher.receipts.cli import main

    assert main(["end", "--job", bad], config_path=tmp_path / "absent.toml") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a Slurm job id" in err and "\x1b" not in err
    with pytest.raises(UsageError):
        slurm.check_job_id(bad)


def test_a_spool_someone_else_can_write_is_refused_and_nothing_is_written(gpus, site):
    folder = spool.spool_path(site)
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o777)  # even with the sticky bit, others could plant receipts
    with pytest.raises(ConfigError, match="refusing the receipts spool .* mode 0777"):
        record.begin(job(), site)
    os.chmod(folder, 0o1777)
    with pytest.raises(ConfigError, match="refusing the receipts spool"):
        record.begin(job(), site)
    assert list(folder.iterdir()) == []


def test_a_spool_that_is_a_link_is_refused(gpus, site, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    spool.spool_path(site).symlink_to(target)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        record.begin(job(), site)
    assert list(target.iterdir()) == []


def test_a_full_disk_is_one_line_and_the_start_record_is_kept(gpus, site, monkeypatch):
    import errno

    from hpcai import safe_files

    record.begin(job(), site)
    folder = spool.spool_path(site)
    before = (folder / "4242.0.node1.start.json").read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safe_files.os, "fsync", no_space)  # where a full disk shows on a write
    with pytest.raises(spool.SpoolError) as caught:
        record.finish(job(), site)
    assert "No space left on device" in caught.value.one_line() and "\n" not in caught.value.one_line()
    assert sorted(p.name for p in folder.iterdir()) == ["4242.0.node1.start.json"]  # no temporary left
    assert (folder / "4242.0.node1.start.json").read_bytes() == before


def test_slurm_end_states_from_scontrol():
    assert slurm.ended_as({"JobState": "COMPLETING", "ExitCode": "0:15"}) == "killed"
    assert slurm.ended_as({"JobState": "COMPLETING", "ExitCode": "143:0"}) == "killed"  # the shell's 128 + 15
    assert slurm.ended_as({"JobState": "COMPLETING", "ExitCode": "2:0"}) == "failed"
    assert slurm.ended_as({"JobState": "COMPLETING", "ExitCode": "0:0"}) == "completed"
    assert slurm.ended_as({"JobState": "COMPLETING", "ExitCode": "1:0"}) == "failed"
    assert slurm.ended_as({"JobState": "CANCELLED", "ExitCode": "0:15"}) == "cancelled"
    assert slurm.ended_as({"JobState": "NODE_FAIL", "ExitCode": "0:0"}) == "node-failed"
    assert slurm.ended_as({"JobState": "REQUEUED", "ExitCode": "0:0"}) == "requeued"
    assert slurm.ended_as({"JobState": "TIMEOUT", "ExitCode": "0:1"}) == "killed"


# ---- the store, `results jobs` and the mix -------------------------------------------------
def finished(site, job_id, gpus_state, joules, **changes) -> None:
    """A job's receipt written the way the epilog writes it, its GPUs' counters moved on."""
    facts = job(job_id=job_id, **changes)
    record.begin(facts, site)
    advance_energy(gpus_state, joules)
    record.finish(facts, site)


def jobs_cli(*args):
    from click.testing import CliRunner

    from hpcai.launcher.cli.hpcai_launch import main

    return CliRunner().invoke(main, ["results", "jobs", *args])


@pytest.fixture
def three_jobs(gpus, site, tmp_path):
    finished(site, "101", gpus, {0: 3600.0, 1: 3600.0})
    finished(site, "102", gpus, {2: 7200.0}, indices={2}, user="bob", account="cv-lab", job_name="resnet-a",
             partition="gpu")
    finished(site, "103", gpus, {3: 1000.0}, indices={3}, user="bob", account="cv-lab", job_name="resnet-b",
             partition="debug", end_state="killed", exit_code="0:15")
    record.begin(job(job_id="104", indices={0}), site)  # still running: its start file only
    return spool.spool_path(site), tmp_path / "store.duckdb"


def test_results_jobs_ingests_the_spool_and_lists_every_job(three_jobs):
    folder, db = three_jobs
    done = jobs_cli("--spool", str(folder), "--store", str(db))
    assert done.exit_code == 0, done.output
    assert "4 receipt file(s) ingested" in done.output
    lines = {line.split()[0]: line for line in done.output.splitlines() if line[:3] in ("101", "102", "103", "104")}
    assert set(lines) == {"101", "102", "103", "104"}
    assert " killed " in lines["103"] and " open " in lines["104"] and " completed " in lines["101"]
    # Warm: nothing new is read; the open job's row goes when its receipt arrives.
    assert "0 receipt file(s) ingested" in jobs_cli("--spool", str(folder), "--store", str(db)).output


def test_the_store_matches_the_receipts_and_keeps_pruned_ones(three_jobs):
    import duckdb

    folder, db = three_jobs
    assert jobs_cli("--spool", str(folder), "--store", str(db)).exit_code == 0
    receipt = json.loads((folder / "101.0.node1.json").read_text())
    (folder / "101.0.node1.json").unlink()  # pruned from the spool after ingestion
    record.finish(job(job_id="104", indices={0}), spool_site(folder))
    assert "1 receipt file(s) ingested" in jobs_cli("--spool", str(folder), "--store", str(db)).output
    con = duckdb.connect(str(db))
    rows = dict(con.execute("SELECT job_id, state FROM receipts").fetchall())
    assert rows == {"101": "completed", "102": "completed", "103": "killed", "104": "completed"}
    stored = con.execute("SELECT sum(energy_j) FROM receipt_gpus JOIN receipts USING (file) "
                         "WHERE job_id = '101'").fetchone()[0]
    assert stored == pytest.approx(sum(g["energy_j"] for g in receipt["gpus"]))
    assert con.execute("SELECT gpu_count, gpu_hours FROM receipts WHERE job_id = '101'").fetchone() \
        == (2, pytest.approx(2 * receipt["duration_s"] / 3600.0))


def spool_site(folder):
    return {"receipts": {"spool": str(folder)}}


def test_summaries_by_partition_user_and_gpu(three_jobs):
    folder, db = three_jobs
    by_partition = jobs_cli("--spool", str(folder), "--store", str(db), "--summary", "partition").output
    rows = {line.split()[0]: line.split() for line in by_partition.splitlines() if line[:3] in ("gpu", "deb")}
    assert rows["gpu"][1] == "2" and rows["debug"][1] == "1"  # jobs; the open one is not summed
    by_user = jobs_cli("--spool", str(folder), "--store", str(db), "--summary", "user", "--partition", "gpu").output
    users = {line.split()[0]: line.split()[1] for line in by_user.splitlines() if line[:3] in ("ali", "bob")}
    assert users == {"alice": "1", "bob": "1"}
    by_gpu = jobs_cli("--spool", str(folder), "--store", str(db), "--summary", "gpu").output
    assert [line.split()[:2] for line in by_gpu.splitlines() if line.startswith("H100")] == [["H100", "3"]]


def test_export_csv_and_parquet_one_row_per_gpu(three_jobs, tmp_path):
    import csv

    import duckdb

    folder, db = three_jobs
    out = tmp_path / "jobs.csv"
    done = jobs_cli("--spool", str(folder), "--store", str(db), "--state", "completed", "-o", str(out))
    assert done.exit_code == 0 and "3 row(s)" in done.output, done.output
    rows = list(csv.DictReader(out.open()))
    assert sorted((r["job_id"], r["gpu_gpu_index"]) for r in rows) == [("101", "0"), ("101", "1"), ("102", "2")]
    parquet = tmp_path / "jobs.parquet"
    assert jobs_cli("--spool", str(folder), "--store", str(db), "-o", str(parquet)).exit_code == 0
    assert duckdb.connect().execute(f"SELECT count(*) FROM '{parquet}'").fetchone()[0] == 5  # 2 + 1 + 1 + the open job's


def test_a_job_name_a_spreadsheet_would_run_is_exported_as_text(gpus, site, tmp_path):
    finished(site, "201", gpus, {0: 10.0}, indices={0}, job_name="=HYPERLINK(\"x\")")
    out = tmp_path / "jobs.csv"
    assert jobs_cli("--spool", str(spool.spool_path(site)), "--store", str(tmp_path / "s.duckdb"),
                    "-o", str(out)).exit_code == 0
    assert "'=HYPERLINK" in out.read_text()


def test_bad_options_are_one_line_and_touch_nothing(three_jobs, tmp_path):
    folder, db = three_jobs
    for args, message in ((["--since", "yesterday"], "--since 'yesterday' is not a date"),
                          (["-o", str(tmp_path / "x.txt")], "cannot tell the format"),
                          (["--format", "csv"], "--format needs --output"),
                          (["--as-mix", str(tmp_path / "mix.toml")], "--as-mix needs --site")):
        done = jobs_cli("--spool", str(folder), "--store", str(db), *args)
        assert done.exit_code == 2 and message in done.output, (args, done.output)
    assert not db.exists()


def test_the_mix_from_measured_gpu_hours_per_class(three_jobs, tmp_path):
    import tomllib

    folder, db = three_jobs
    site_file = tmp_path / "site.toml"
    site_file.write_text('name = "receipts-test"\n\n'
                         '[[classes]]\nname = "llm"\nworkload = "llama3-8b-pretrain"\njob_name = "llama*"\n\n'
                         '[[classes]]\nname = "cv"\nworkload = "resnet50"\naccount = "cv-*"\n')
    out = tmp_path / "mix.toml"
    done = jobs_cli("--spool", str(folder), "--store", str(db), "--site", str(site_file), "--as-mix", str(out))
    assert done.exit_code == 0, done.output
    mix = tomllib.loads(out.read_text())["class"]
    by = {(c["partition"], c["name"].removesuffix(f".{c['partition']}")): c for c in mix}
    assert len({c["name"] for c in mix}) == len(mix)  # unique: cv is in two partitions, named per partition
    assert {c["name"] for c in mix} == {"llm", "cv.gpu", "cv.debug"}
    receipts = {n: json.loads((folder / f"{n}.0.node1.json").read_text()) for n in ("101", "102", "103")}
    gh = {n: r["gpu_count"] * r["duration_s"] / 3600.0 for n, r in receipts.items()}
    assert by[("gpu", "llm")]["share"] == pytest.approx(gh["101"] / (gh["101"] + gh["102"]), rel=1e-6)
    assert by[("gpu", "cv")]["share"] == pytest.approx(gh["102"] / (gh["101"] + gh["102"]), rel=1e-6)
    assert by[("debug", "cv")]["share"] == pytest.approx(1.0)
    for partition in ("gpu", "debug"):
        assert sum(c["share"] for c in mix if c["partition"] == partition) == pytest.approx(1.0, abs=1e-6)
    energy_102 = sum(g["energy_j"] for g in receipts["102"]["gpus"])
    assert by[("gpu", "cv")]["measured_wh_per_gpu_hour"] == pytest.approx(energy_102 / 3600.0 / gh["102"], rel=1e-3)
    assert by[("gpu", "llm")]["workload"] == "llama3-8b-pretrain"
    assert by[("gpu", "cv")]["measured_gpu"] == receipts["102"]["gpus"][0]["model"]

    # The planner straight from the spool: the same mix, planned and written beside the plan.
    from click.testing import CliRunner

    from hpcai.launcher.cli.hpcai_launch import main

    site_file.write_text(site_file.read_text().replace('name = "receipts-test"\n',
                                                       f'name = "receipts-test"\n\n[receipts]\nspool = "{folder}"\n'))
    (tmp_path / "results").mkdir()
    planned = CliRunner().invoke(main, ["plan", str(tmp_path / "results"), "--mix-from-receipts", "--site",
                                        str(site_file), "--reference", "-o", str(tmp_path / "plan")])
    assert planned.exit_code == 0, planned.output
    assert tomllib.loads((tmp_path / "plan" / "mix.toml").read_text())["class"] == mix


def test_node_energy_from_the_sites_node_meter(gpus, site, tmp_path):
    """pm_counters (hpcai/measure/pm_counters.py) read from a sysfs-shaped folder, as on an HPE Cray EX node."""
    meter = tmp_path / "pm_counters"
    meter.mkdir()
    (meter / "power").write_text("450 W\n")
    (meter / "energy").write_text("1000000 J\n")
    site = {**site, "node_power": {"sources": ["pm_counters"], "pm_counters": {"root": str(meter)}}}
    record.begin(job(), site)
    (meter / "power").write_text("550 W\n")
    record.finish(job(), site)
    receipt = json.loads((spool.spool_path(site) / "4242.0.node1.json").read_text())
    assert receipt["node_source"] == "pm_counters" and receipt["node_energy_method"] == "two-point-power"
    assert (receipt["node_power_start_w"], receipt["node_power_end_w"]) == (450.0, 550.0)
    assert receipt["node_energy_j"] is not None and receipt["node_energy_j"] >= 0


def test_no_node_meter_configured_leaves_node_energy_empty(gpus, site):
    record.begin(job(), site)
    record.finish(job(), site)
    receipt = json.loads((spool.spool_path(site) / "4242.0.node1.json").read_text())
    assert receipt["node_energy_j"] is None and receipt["node_source"] is None


def test_files_in_the_spool_that_are_not_root_receipts_are_left_out_and_said(three_jobs):
    folder, db = three_jobs
    (folder / "junk.json").write_text("not json")
    planted = folder / "999.0.node1.json"
    planted.write_text(json.dumps({"job_id": "999", "state": "completed", "gpus": []}))
    os.chown(planted, 65534, 65534)  # someone else's file (nobody's)
    (folder / "888.0.node1.json").symlink_to(folder / "101.0.node1.json")
    done = jobs_cli("--spool", str(folder), "--store", str(db))
    assert done.exit_code == 0, done.output
    assert "2 file(s) in" in done.output and "not written by root" in done.output
    assert "1 file(s) in" in done.output and "are not receipts" in done.output
    listed = {line.split()[0] for line in done.output.splitlines() if line[:1].isdigit()}
    assert "999" not in listed and "888" not in listed and "4 receipt(s)" in done.output  # (not in a timestamp)


def test_a_reading_that_is_not_a_number_is_stored_as_nothing(tmp_path):
    with spool.open_spool(tmp_path / "spool", create=True) as folder:
        spool.write(folder, "1.0.n.json", {"job_id": "1", "gpus": [{"energy_j": float("nan"), "power_w": float("inf")}]})
        assert spool.read(folder, "1.0.n.json")["gpus"] == [{"energy_j": None, "power_w": None}]


def test_a_run_requeued_while_it_ran_is_the_started_runs_receipt_marked_requeued(gpus, site):
    record.begin(job(), site)  # Slurm's restart count 0 at the prolog
    advance_energy(gpus, {0: 100.0})
    line = record.finish(job(restarts=1, end_state="completed"), site)  # raised by the requeue
    assert "(requeued)" in line
    folder = spool.spool_path(site)
    assert sorted(p.name for p in folder.iterdir()) == ["4242.0.node1.json"]
    receipt = json.loads((folder / "4242.0.node1.json").read_text())
    assert receipt["state"] == "requeued" and receipt["restarts"] == 0 and receipt["problems"] == []
    assert receipt["gpus"][0]["energy_j"] >= 100.0


def test_receipts_stay_in_the_spool_while_the_store_cannot_be_used(three_jobs, tmp_path):
    folder, db = three_jobs
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    elsewhere = tmp_path / "elsewhere.duckdb"
    elsewhere.write_bytes(b"")
    db.symlink_to(elsewhere)  # not a store hpcai will open
    done = jobs_cli("--spool", str(folder), "--store", str(db))
    assert done.exit_code == 2 and "cannot use the receipts store" in done.output
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    db.unlink()
    assert "4 receipt file(s) ingested" in jobs_cli("--spool", str(folder), "--store", str(db)).output


def test_a_node_meter_that_does_not_answer_is_a_problem_not_a_failure(gpus, site, tmp_path):
    site = {**site, "node_power": {"sources": ["pm_counters"], "pm_counters": {"root": str(tmp_path / "none")}}}
    record.begin(job(), site)
    record.finish(job(), site)
    receipt = json.loads((spool.spool_path(site) / "4242.0.node1.json").read_text())
    assert receipt["node_energy_j"] is None and len(receipt["gpus"]) == 2
    assert [p for p in receipt["problems"] if p.startswith("node meter at the start")]


# ---- the measurement tier (issue 44 §3) -------------------------------------------------------
ANALYZER = {"analyzer": {"name": "Yokogawa WT310E", "agreement_frac": 0.01}}


def test_every_receipt_carries_the_nodes_measurement_tier(gpus, site, tmp_path):
    no_calibration = {**site, "node_power": {"calibration_file": str(tmp_path / "none.json")}}
    record.begin(job(), no_calibration)
    folder = spool.spool_path(site)
    started = json.loads((folder / "4242.0.node1.start.json").read_text())
    assert started["tier"]["tier"] == "counter" and "no calibration at" in started["tier"]["reason"]
    record.finish(job(), {**site, "node_power": ANALYZER})  # the tier in force at the end
    receipt = json.loads((folder / "4242.0.node1.json").read_text())
    assert receipt["tier"] == {"tier": "analyzer", "agreement_within_frac": 0.01, "stated_agreement_frac": 0.01,
                               "meter_api": "Yokogawa WT310E", "calibrated": None, "reason": None}


def test_results_jobs_stores_and_lists_the_tier_and_says_when_tiers_mix(gpus, site, tmp_path):
    import duckdb

    finished({**site, "node_power": ANALYZER}, "201", gpus, {0: 100.0})
    counter_site = {**site, "node_power": {"calibration_file": str(tmp_path / "none.json")}}
    finished(counter_site, "202", gpus, {0: 100.0})
    folder, db = spool.spool_path(site), tmp_path / "store.duckdb"
    listed = jobs_cli("--spool", str(folder), "--store", str(db), "--limit", "5")
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[0]: line for line in listed.output.splitlines() if line[:3] in ("201", "202")}
    assert "analyzer" in rows["201"].split() and "counter" in rows["202"].split()
    assert "measurement tier: analyzer+counter" in listed.output and "mix measurement tiers" in listed.output
    summary = jobs_cli("--spool", str(folder), "--store", str(db), "--summary", "partition").output
    assert [line.split()[-1] for line in summary.splitlines() if line.startswith("gpu ")] == ["analyzer+counter"]
    con = duckdb.connect(str(db))
    assert con.execute("SELECT tier, tier_agreement_frac, tier_meter_api FROM receipts WHERE job_id = '201'"
                       ).fetchone() == ("analyzer", 0.01, "Yokogawa WT310E")
    assert con.execute("SELECT tier, tier_stated_frac, tier_reason LIKE 'no calibration at%' FROM receipts "
                       "WHERE job_id = '202'").fetchone() == ("counter", 0.05, True)


def test_a_store_made_before_tiers_gains_their_columns(tmp_path):
    import duckdb

    from hpcai.launcher.receipts import store

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    old = {k: v for k, v in store.RECEIPT_COLUMNS.items() if not k.startswith("tier")}
    con.execute("CREATE TABLE receipts (" + ", ".join(f'"{k}" {v}' for k, v in old.items()) + ")")
    con.close()
    con = store.open_store(tmp_path, str(db))
    columns = [r[0] for r in con.execute("DESCRIBE receipts").fetchall()]
    assert columns == list(store.RECEIPT_COLUMNS)


# ---- a job whose epilog never ran (a failed node) ---------------------------------------------
class FakeSlurm:
    """A FAKE scontrol at helper.scontrol (as tests/unit/test_cap_authority.py fakes it): the
    lines `scontrol show job -o` prints, and the error a purged job gives ("slurm_load_jobs
    error: Invalid job id specified", src/scontrol/info_job.c); node1 is this host."""

    def __init__(self, jobs: dict[str, str], down: bool = False):
        self.jobs, self.down, self.asked = jobs, down, []

    def __call__(self, config, *args):
        from hpcai.errors import PowerError

        self.asked.append(args)
        if args[:2] == ("show", "node"):
            return f"NodeName=node1 NodeHostName={__import__('socket').gethostname()} State=MIXED\n"
        if args[:2] == ("show", "hostnames"):
            return "\n".join(args[2].split(",")) + "\n"
        job_id = args[-1]
        if self.down:
            raise PowerError(f"scontrol {' '.join(args)} failed: Unable to contact slurm controller")
        if job_id not in self.jobs:
            raise PowerError(f"scontrol {' '.join(args)} failed: slurm_load_jobs error: Invalid job id specified")
        return self.jobs[job_id] + "\n"


def slurm_job(job_id, state="RUNNING", restarts=0, nodes="node1", idx="0-1") -> str:
    return (f"JobId={job_id} JobName=job{job_id} UserId=carol(1003) Account=ml QOS=normal JobState={state} "
            f"Restarts={restarts} ExitCode=0:0 Partition=gpu NodeList={nodes} OverSubscribe=OK "
            f"Nodes={nodes} CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:{idx})")


@pytest.fixture
def fake_slurm(monkeypatch):
    from hpcai.launcher.power import helper

    fake = FakeSlurm({})
    monkeypatch.setattr(helper, "scontrol", fake)
    return fake


def test_the_next_prolog_turns_a_failed_nodes_start_files_into_receipts(gpus, site, fake_slurm):
    record.begin(job(job_id="500", indices={0, 1}), site)
    record.begin(job(job_id="501", indices={2}), site)
    record.begin(job(job_id="502", indices={3}), site)
    started = json.loads((spool.spool_path(site) / "500.0.node1.start.json").read_text())
    fake_slurm.jobs.update({"500": slurm_job("500", "NODE_FAIL"), "502": slurm_job("502", idx="3"),
                            "600": slurm_job("600")})  # 501: purged, Slurm no longer knows it
    line = record.start({}, site, "600")
    assert "500 (node-failed)" in line and "501 (ended-without-epilog)" in line and "502" not in line
    folder = spool.spool_path(site)
    assert sorted(p.name for p in folder.iterdir()) == ["500.0.node1.json", "501.0.node1.json",
                                                        "502.0.node1.start.json", "600.0.node1.start.json"]
    failed = json.loads((folder / "500.0.node1.json").read_text())
    assert failed["state"] == "node-failed" and failed["start"] == started["start"] and failed["end"] is None
    assert [g["energy_j"] for g in failed["gpus"]] == [None, None] and failed["lost_gpus"] == []
    assert [g["energy_start_j"] for g in failed["gpus"]] == [g["energy_j"] for g in started["gpus"]]
    assert failed["problems"] == ["energy unknown: the node failed before the job's epilog ran, "
                                  "so no end reading was taken"]
    assert failed["tier"] == started["tier"] and failed["user"] == "alice"
    gone = json.loads((folder / "501.0.node1.json").read_text())
    assert gone["state"] == "ended-without-epilog" and "Slurm no longer knows it" in gone["problems"][0]
    listed = jobs_cli("--spool", str(folder), "--store", str(spool.spool_path(site).parent / "s.duckdb"),
                      "--state", "node-failed")
    assert [line.split()[0] for line in listed.output.splitlines() if " node1 " in line] == ["500"]


def test_the_epilog_also_files_leftovers_but_never_for_a_run_still_under_way_here(gpus, site, fake_slurm):
    record.begin(job(job_id="700", indices={0}), site)  # requeued since, now running on node2
    record.begin(job(job_id="701", indices={1}), site)  # its epilog runs now, beside this one
    record.begin(job(job_id="702", indices={2}), site)  # ended COMPLETED, yet its start file is here
    record.begin(job(job_id="600", indices={3}), site)
    fake_slurm.jobs.update({"700": slurm_job("700", restarts=1, nodes="node2"),
                            "701": slurm_job("701", "COMPLETING", idx="1"),
                            "702": slurm_job("702", "COMPLETED", idx="2"),
                            "600": slurm_job("600", "COMPLETING", idx="3")})
    line = record.end({}, site, "600")
    assert "receipt for job 600 (completed)" in line
    assert "700 (node-failed)" in line and "702 (node-failed)" in line and "701" not in line
    assert sorted(p.name for p in spool.spool_path(site).iterdir()) == [
        "600.0.node1.json", "700.0.node1.json", "701.0.node1.start.json", "702.0.node1.json"]


def test_leftovers_wait_while_slurm_does_not_answer_and_an_epilogs_receipt_is_kept(gpus, site, fake_slurm):
    record.begin(job(job_id="800", indices={0}), site)
    fake_slurm.down = True
    assert "left for later: 800: " in record.leftovers({}, site, job(job_id="600"))
    folder = spool.spool_path(site)
    assert [p.name for p in folder.iterdir()] == ["800.0.node1.start.json"]
    record.finish(job(job_id="800", indices={0}), site)  # its epilog's receipt, then a start file again
    complete = (folder / "800.0.node1.json").read_bytes()
    record.begin(job(job_id="800", indices={0}), site)
    fake_slurm.down = False  # Slurm forgot 800: its complete receipt stays as the epilog wrote it
    assert "800 (ended-without-epilog)" in record.leftovers({}, site, job(job_id="600"))
    assert (folder / "800.0.node1.json").read_bytes() == complete
    assert [p.name for p in folder.iterdir()] == ["800.0.node1.json"]


def test_a_start_file_whose_name_and_record_disagree_is_left_alone(gpus, site, fake_slurm):
    record.begin(job(job_id="900", indices={0}), site)
    folder = spool.spool_path(site)
    os.rename(folder / "900.0.node1.start.json", folder / "901.0.node1.start.json")
    assert record.leftovers({}, site, job(job_id="600")) == ""
    assert fake_slurm.asked == []


def test_the_power_package_imports_its_session_and_backends_only_when_used():
    import subprocess
    import sys

    code = ("import sys, hpcai.launcher.receipts.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('hpcai.launcher.power.'))); "
            "from hpcai.launcher.power import CapSession, make_backend; print(CapSession.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "hpcai.launcher.power.session" not in out[0] and "hpcai.launcher.power.backends" not in out[0]
    assert out[1] == "hpcai.launcher.power.session"
