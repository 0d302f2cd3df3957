"""Power profiles end to end on FAKE NVIDIA nodes (tests/fakes: pynvml with profile
state): a run requests the profile, reads it back, restores it and records it; a
board without profiles is refused in one line before anything changes; a profile
sweep gives each profile its own row in the report; `power restore` replays the
journal a killed run left."""
from __future__ import annotations

import json

from conftest import FakeNode, assert_valid_result, one_line_error
from fakes import fake_gpu_state as fgs

from hpcai.gpu.profiles import PROFILE_IDS

TINY = ["resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1"]
SHORT = ["--epochs", "1", "--warmup-epochs", "0"]
FIXED = ["--ci-target", "off", "--steps-per-epoch", "30"]
MAX_Q, COMPUTE = PROFILE_IDS["max-q"], PROFILE_IDS["compute"]


def _profiled(tmp_path, n=2, **overrides) -> FakeNode:
    return FakeNode(tmp_path, fgs.make_devices(n, "nvidia", power_profiles=[0, MAX_Q, COMPUTE],
                                               **overrides))


def test_a_profiled_run_records_set_read_back_and_restored(tmp_path, result_schema):
    node = _profiled(tmp_path, requested_profiles=[COMPUTE])
    try:
        done = node.launch(*TINY, *SHORT, "--cap", "300", "--power-profile", "MAX_Q",
                           "-o", str(node.results))
        assert done.returncode == 0, done.stderr
        assert "power profiles restored" in done.stderr
        for dev in node.devices():
            assert dev["requested_profiles"] == [COMPUTE]  # what it had before
            assert [(e["action"], e["ids"]) for e in dev["profile_log"]] == [
                ("clear", [COMPUTE]), ("set", [MAX_Q]), ("clear", [MAX_Q]), ("set", [COMPUTE])]
        assert node.journal_files() == []
        doc = node.only_result()
        assert_valid_result(doc, result_schema)
        assert doc["schema_version"] == "1.1"
        assert doc["spec"]["power"]["profile"] == "max-q"
        assert doc["run_id"].endswith("-cap300W-profile-max-q")
        record = doc["power"]["profile"]
        assert record["requested"] == "max-q" and record["method"] == "nvml"
        for gpu in record["gpus"]:
            assert gpu["before"] == ["compute"] and gpu["read_back_requested"] == ["max-q"]
            assert gpu["read_back_enforced"] == ["max-q"] and gpu["restored"] is True
    finally:
        node.stop_everything()


def test_a_board_without_profiles_is_refused_in_one_line_and_nothing_changes(fake_nvidia_node):
    node = fake_nvidia_node  # the default fake H100 has no profiles: NOT_SUPPORTED
    done = node.launch(*TINY, "--cap", "300", "--power-profile", "max-q", "-o", str(node.results))
    one_line_error(done, "--power-profile max-q: GPU 0 or its driver has no workload power profiles",
                   "drop --power-profile")
    assert done.returncode == 2
    for dev in node.devices():
        assert dev["set_log"] == [] and "profile_log" not in dev  # no cap set either
    assert not node.results.exists() and node.journal_files() == []
    bad = node.launch(*TINY, "--power-profile", "turbo", "-o", str(node.results))
    one_line_error(bad, "'turbo' is not an NVML workload power profile")
    assert bad.returncode == 2


def test_a_profile_sweep_gives_each_profile_its_own_row_in_the_report(tmp_path):
    node = _profiled(tmp_path, n=1)
    try:
        done = node.launch(*TINY, *SHORT, *FIXED, "--power-profile", "max-q,compute",
                           "--idle-s", "0", "--seed", "3", "-o", str(node.results))
        assert done.returncode == 0, done.stderr
        summary = json.loads(next(node.results.glob("sweep-*/sweep.json")).read_text())
        assert summary["power_profiles"] == ["max-q", "compute"]
        assert sorted(r["power_profile"] for r in summary["runs"]) == ["compute", "max-q"]
        assert all(r["status"] == "complete" for r in summary["runs"])
        assert node.devices()[0]["requested_profiles"] == []
        again = node.launch(*TINY, *SHORT, *FIXED, "--power-profile", "max-q,compute",
                            "--idle-s", "0", "-o", str(node.results))
        assert again.returncode == 0 and again.stdout.count("already complete") == 2
        report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
        assert report.returncode == 0, report.stderr
        md = (tmp_path / "report" / "report.md").read_text()
        assert "resnet50 (tiny), power profile max-q" in md
        assert "resnet50 (tiny), power profile compute" in md
    finally:
        node.stop_everything()


def test_a_killed_launcher_leaves_the_profile_to_power_restore(tmp_path):
    import time

    from hpcai.launcher.power import workload_procs

    node = _profiled(tmp_path, requested_profiles=[COMPUTE])
    try:
        shown = node.launch("power", "profiles")
        assert shown.returncode == 0, shown.stderr
        assert "GPU 0: offered max-p, max-q, compute; requested compute; enforced compute" in shown.stdout
        proc = node.popen(*TINY, "--power-profile", "max-q", "--epochs", "500", "-o", str(node.results))
        deadline = time.time() + 120

        def journal():
            found = [p for p in node.journal_files() if p.name.endswith(".profiles.json")]
            return found[0] if found and "workload" in json.loads(found[0].read_text()) else None

        while journal() is None:
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() else ""
            time.sleep(0.2)
        assert [d["requested_profiles"] for d in node.devices()] == [[MAX_Q]] * 2
        workload = json.loads(journal().read_text())["workload"]
        proc.kill()  # SIGKILL: no handler runs
        proc.wait(timeout=30)
        while workload_procs.find(workload):  # the lifeline stops it
            assert time.time() < deadline + 60, "the workload outlived its launcher"
            time.sleep(0.2)
        refused = node.launch(*TINY, "-o", str(node.results))  # no run while the journal exists
        one_line_error(refused, "power profile journal", "power restore")
        done = node.launch("power", "restore")
        assert done.returncode == 0, done.stderr
        assert "GPU 0: power profiles back to compute" in done.stdout
        assert [d["requested_profiles"] for d in node.devices()] == [[COMPUTE]] * 2
        assert node.journal_files() == []
    finally:
        node.stop_everything()


def test_an_amd_run_sets_determinism_and_puts_the_old_level_back(tmp_path, result_schema):
    node = FakeNode(tmp_path, fgs.make_devices(2, "amd"))
    try:
        done = node.launch(*TINY, *SHORT, "--power-profile", "determinism-1400", "-o", str(node.results))
        assert done.returncode == 0, done.stderr
        for dev in node.devices():
            assert [(e["level"], e["mhz"]) for e in dev["perf_log"]] == [("DETERMINISM", 1400), ("AUTO", None)]
        doc = node.only_result()
        assert_valid_result(doc, result_schema)
        assert doc["run_id"].endswith("-profile-determinism-1400")
        gpu = doc["power"]["profile"]["gpus"][0]
        assert gpu["before"] == ["auto"] and gpu["read_back_enforced"] == ["determinism"]
        assert gpu["restored"] is True and node.journal_files() == []
        nvml_name = node.launch(*TINY, "--power-profile", "max-q", "-o", str(node.results))
        one_line_error(nvml_name, "max-q is an NVML profile and GPU 0 is AMD")
        assert nvml_name.returncode == 2
    finally:
        node.stop_everything()
