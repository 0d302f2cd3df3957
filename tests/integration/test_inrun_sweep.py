"""In-run cap sweeps for real: `hpcai-launch resnet50 --preset tiny --cap LIST`
trains real PyTorch on the CPU in ONE process that measures a segment per cap;
the launcher sets each segment's cap over the control channel. GPU limits and
power readings come from the FAKE pynvml (tests/fakes), whose reported power
is min(draw, cap): a segment measured under the wrong cap shows in its power.
"""
import json
import signal
import threading
import time

import pytest

from conftest import assert_valid_result, one_line_error
from measured_runs import assert_measured, finished

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny", "--nproc", "1", "--device", "cpu"]
# Short adaptive windows: the test is about the channel and the lifecycle.
FAST = ["--max-window-s", "1.5", "--idle-s", "0"]


def sweep_dir(node):
    (folder,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    return folder


def summary(node):
    return json.loads((sweep_dir(node) / "sweep.json").read_text())


def segment_results(node) -> list[dict]:
    docs = [json.loads(p.read_text()) for p in sweep_dir(node).glob("*/result.json")]
    return sorted(docs, key=lambda d: d["segment"]["index"])


def set_log(node) -> list[float]:
    return [e["watts"] for e in node.devices()[0]["set_log"]]


class Watched:
    """The launcher in the background, its output collected as it comes."""

    def __init__(self, node, *args):
        self.proc = node.popen(*args)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout),
                                       daemon=True)
        self.reader.start()

    def text(self) -> str:
        return "".join(self.lines)

    def wait_until(self, predicate, timeout=300):
        deadline = time.time() + timeout
        while not predicate(self.text()):
            assert self.proc.poll() is None, self.text()
            assert time.time() < deadline, self.text()
            time.sleep(0.1)


def measuring_segment(k: int):
    """Segment k's measured blocks have begun (its cap is set, its window open),
    as the workload's own log says (the launcher's lines may come before it)."""
    def check(text: str) -> bool:
        marker = f"[hpcai] segment {k}:"
        # A measured epoch's line says where the window is: `epoch N (segment k, window ...)`.
        return marker in text and f"(segment {k}, window " in text.split(marker, 1)[1]
    return check


def test_one_process_measures_every_cap_and_each_segment_is_a_result(fake_nvidia_node,
                                                                     result_schema, tmp_path):
    node = fake_nvidia_node
    args = [*TINY, "--cap", "200,300,400", "--seed", "5", *FAST, "-o", str(node.results)]
    done = node.launch(*args)
    failed = assert_measured(done)  # exit 0, or 3 for what a loaded machine fails
    doc = summary(node)
    order = [r["cap_w"] for r in doc["runs"]]
    assert doc["in_run"] is True and doc["seed"] == 5 and doc["order"] == "shuffle"
    assert len(doc["runs"]) == 3 and finished([r["status"] for r in doc["runs"]], failed)
    # In-run: each cap set once, one after another, no restore in between; the
    # snapshot (700 W) back at the end, the journal gone.
    assert set_log(node) == [*order, 700.0]
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    # One workload process: one process folder with the log and the channel.
    (process,) = [p for p in sweep_dir(node).iterdir() if p.name.endswith("-inrun")]
    assert (process / "workload.log").exists() and (process / "control").is_dir()
    assert not (process / "result.json").exists()  # not a result: report and resume skip it
    results = segment_results(node)
    assert [r["spec"]["power"]["cap_w"] for r in results] == order
    for k, result in enumerate(results):
        assert_valid_result(result, result_schema)
        seg = result["segment"]
        assert seg["process_run_id"] == process.name and seg["in_run"] is True
        assert seg["after_segment"] == (k - 1 if k else None)
        assert seg["enforced_w"] == {"0": order[k], "1": order[k]}
        assert result["spec"]["sweep"]["in_run"] is True
        assert result["spec"]["sweep"]["position"] == k
        # The fake draws min(650 W, cap) per GPU: this segment's window saw its cap.
        assert result["power"]["mean_power_w"] == pytest.approx(2 * min(650.0, order[k]), rel=0.02)
        assert result["power"]["cap"]["enforced"] is True
        limits = result["launcher"]["gpu_limits"][0]
        assert limits["enforced_at_start_w"] == limits["enforced_at_end_w"] == order[k]
        settle, window = result["measurement"]["settle"], result["measurement"]["window"]
        assert settle["epochs"] >= 1 and settle["seconds"] > 0
        assert window["mode"] == "adaptive" and window["ci_target"] == 0.02
        assert window["blocks"] == result["protocol"]["measured_epochs_completed"] >= 1
        assert window["half_width"]["throughput_frac"] is None or \
            window["half_width"]["throughput_frac"] >= 0
        assert (sweep_dir(node) / result["run_id"] / "samples.csv").exists()
    # The process's own record: complete, its warm-up once, then every segment's epochs.
    record = json.loads((process / "process.json").read_text())
    assert record["status"] == "complete"
    assert sum(1 for e in record["epochs"] if e["warmup"]) == record["protocol"]["warmup_epochs"] \
        + sum(r["measurement"]["settle"]["epochs"] for r in results)

    # The same command again finds every cap complete and changes nothing.
    again = node.launch(*args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already complete, skipped") == 3
    assert set_log(node) == [*order, 700.0]

    # The report reads segments as it reads runs: every segment whose validity
    # checks hold is a cell (on a loaded machine a segment's tiny blocks may spread
    # too widely: then the report leaves it out, as it would any such run).
    report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    valid = sorted(r["spec"]["power"]["cap_w"] for r in results
                   if r["validity"]["verdict"] != "fail")
    if not valid:
        assert report.returncode != 0 and "no complete, valid result" in report.stderr
        return
    assert report.returncode == 0, report.stderr
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert sorted(c["cap_w"] for c in rep["cells"]) == valid


def test_sigterm_mid_segment_restores_the_snapshot_and_resume_runs_only_the_rest(
        fake_nvidia_node):
    node = fake_nvidia_node
    # Windows of at least 6 s: the signal lands inside segment 2 even when a loaded
    # machine delays this test's polling (with FAST's 1.5 s it once came after it).
    args = [*TINY, "--cap", "200,300,400", "--order", "ascending", "--min-window-s", "6",
            "--max-window-s", "8", "--idle-s", "0", "-o", str(node.results)]
    run = Watched(node, *args)
    run.wait_until(measuring_segment(2))
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(timeout=120) == 128 + signal.SIGTERM, run.text()
    run.reader.join(timeout=5)
    # The limits from before the sweep, not the first segment's 200 W.
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    assert set_log(node) == [200.0, 300.0, 700.0]
    first = summary(node)
    assert first["status"] == "interrupted"
    assert [r["status"] for r in first["runs"]] == ["complete", "interrupted", "pending"]
    statuses = {r["spec"]["power"]["cap_w"]: r["status"] for r in segment_results(node)}
    assert statuses == {200.0: "complete", 300.0: "interrupted"}

    done = node.launch(*args)
    assert done.returncode == 0, done.stderr
    second = summary(node)
    assert [r["status"] for r in second["runs"]] == ["complete"] * 3
    assert [r["skipped"] for r in second["runs"]] == [True, False, False]
    # The second process started at 300 W: the complete 200 W segment was not measured again.
    assert set_log(node) == [200.0, 300.0, 700.0, 300.0, 400.0, 700.0]


def test_sigkill_of_the_launcher_leaves_the_journal_and_no_segment_complete(fake_nvidia_node):
    node = fake_nvidia_node
    args = [*TINY, "--cap", "200,300", "--order", "ascending", "--max-window-s", "30",
            "--idle-s", "0", "-o", str(node.results)]
    run = Watched(node, *args)
    run.wait_until(measuring_segment(1))
    run.proc.kill()  # SIGKILL: no handler runs, the cap stays
    run.proc.wait(timeout=30)
    assert node.limits() == [200.0, 200.0]
    (journal,) = node.journal_files()
    record = json.loads(journal.read_text())
    assert [g["limit_w"] for g in record["gpus"]] == [700.0, 700.0]  # the pre-sweep snapshot
    from hpcai.launcher.power import workload_procs

    deadline = time.time() + 120
    while workload_procs.find(record.get("workload")):  # the lifeline stops the workload
        assert time.time() < deadline, "the workload outlived its launcher"
        time.sleep(0.2)
    # The killed segment: never complete (its launcher did not check it).
    (path,) = sweep_dir(node).glob("*/result.json")  # written `running` when it started
    assert json.loads(path.read_text())["status"] != "complete"
    assert summary(node)["runs"][0]["status"] != "complete"
    done = node.launch("power", "restore")
    assert done.returncode == 0, done.stderr
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []


def test_a_single_run_with_a_ci_target_settles_and_measures_adaptively(fake_nvidia_node,
                                                                        result_schema):
    node = fake_nvidia_node
    done = node.launch(*TINY, "--cap", "300", "--ci-target", "0.5", "--max-window-s", "3",
                       "-o", str(node.results))
    assert_measured(done)
    result = node.only_result()
    assert_valid_result(result, result_schema)
    window = result["measurement"]["window"]
    assert window["mode"] == "adaptive" and window["ci_target"] == 0.5
    assert window["stopped"] in ("target", "max_window")
    assert window["blocks"] == result["protocol"]["measured_epochs_completed"]
    assert result["measurement"]["settle"]["stopped"] in ("settled", "max_settle")
    # Without --ci-target a single run keeps the preset's fixed epochs.
    plain = node.launch(*TINY, "--cap", "300", "--dry-run", "--json", "-o", str(node.results))
    assert plain.returncode == 0 and '"ci_target"' not in plain.stdout


@pytest.mark.parametrize("extra, fragment", [
    (["--cap", "300", "--in-run"], "--in-run needs a sweep of two caps or more"),
    (["--cap", "200,300", "--in-run", "--slurm", "--array"],
     "--in-run measures every cap in one job step, and --array makes one task per run"),
    (["--cap", "200,300", "--ci-target", "0"], "must lie between 0 and 1"),
    (["--cap", "200,300", "--ci-target", "1.5"], "must lie between 0 and 1"),
    (["--cap", "200,300", "--min-window-s", "20", "--max-window-s", "10"], "shorter than"),
    (["--cap", "200,300", "--preset", "paper", "--max-window-s", "5"],
     "shorter than --min-window-s 30"),
])
def test_bad_input_is_one_line_and_changes_nothing(fake_nvidia_node, extra, fragment):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--device", "cpu", *extra, "-o", str(node.results))
    one_line_error(done, fragment)
    assert set_log(node) == [] and not node.results.exists()


def test_cosmoflow_measures_in_run_too(fake_nvidia_node, result_schema):
    """Every training workload measures in-run; CosmoFlow's 3D cubes through the
    same trainer. (The fallback of a workload that cannot: tests/unit/test_inrun_waves.py.)"""
    node = fake_nvidia_node
    done = node.launch("cosmoflow", "--preset", "tiny", "--device", "cpu", "--nproc", "1",
                       "--cap", "250,350", "--order", "ascending", *FAST,
                       "-o", str(node.results))
    assert_measured(done)
    assert "cannot measure in-run" not in done.stderr
    assert set_log(node) == [250.0, 350.0, 700.0]
    results = segment_results(node)
    assert [r["spec"]["power"]["cap_w"] for r in results] == [250.0, 350.0]
    assert len({r["segment"]["process_run_id"] for r in results}) == 1  # one process
    for result in results:
        assert_valid_result(result, result_schema)
        assert result["status"] == "complete" and result["work"]["unit"] == "samples"
        assert result["power"]["mean_power_w"] == pytest.approx(
            2 * result["spec"]["power"]["cap_w"], rel=0.02)


def test_an_in_run_segment_with_data_from_storage_records_its_data_wait(fake_nvidia_node,
                                                                       result_schema, tmp_path):
    """Segments run their epochs through the single-run loop: with --data each
    records the wait for its batches and the bytes read (a second copy of the
    loop once dropped the data counters: 0 s waiting, 0 bytes)."""
    node, data = fake_nvidia_node, tmp_path / "jpegs"
    made = node.launch("data", "make", "resnet50", "--preset", "tiny", "--samples", "40",
                       "-o", str(data))
    assert made.returncode == 0, made.stderr
    done = node.launch(*TINY, "--data", str(data), "--data-workers", "1", "--cap", "250,350",
                       "--order", "ascending", *FAST, "-o", str(node.results))
    # A loaded machine can spread a segment's epochs past throughput_cv: validity
    # doing its job (exit 3, the measurement complete), not what this test is about.
    assert_measured(done)
    results = segment_results(node)
    assert [r["spec"]["power"]["cap_w"] for r in results] == [250.0, 350.0]
    for result in results:
        assert_valid_result(result, result_schema)
        assert result["status"] == "complete"
        measured = [e for e in result["epochs"] if not e["warmup"]]
        assert measured and all(e["data_wait_s"] > 0 and e["data_bytes"] > 0 for e in measured)
        inp = result["input"]
        assert inp["source"] == "storage" and inp["path"] == str(data)
        assert inp["data_wait_s"] > 0 and 0 < inp["data_wait_share"] < 1
        assert inp["bytes_read_node"] == sum(e["data_bytes"] for e in measured) > 0


def test_litgpt_pretraining_measures_in_run_from_inside_its_own_loop(fake_nvidia_node,
                                                                     result_schema):
    """LitGPT runs its own loop: the segments are driven from its step clock."""
    node = fake_nvidia_node
    done = node.launch("llama3-8b-pretrain", "--preset", "tiny", "--device", "cpu",
                       "--cap", "200,300", "--order", "ascending", "--max-window-s", "2",
                       "--idle-s", "0", "-o", str(node.results))
    # Under load a segment can rightly fail throughput_cv (exit 3): what this test is
    # about, what the run records, holds either way.
    assert_measured(done)
    assert set_log(node) == [200.0, 300.0, 700.0]
    results = segment_results(node)
    assert [r["spec"]["power"]["cap_w"] for r in results] == [200.0, 300.0]
    for result in results:
        assert_valid_result(result, result_schema)
        assert result["status"] == "complete" and result["work"]["unit"] == "tokens"
        assert result["power"]["mean_power_w"] == pytest.approx(
            2 * result["spec"]["power"]["cap_w"], rel=0.02)
        window = result["measurement"]["window"]
        assert window["mode"] == "adaptive"
        assert window["blocks"] == result["protocol"]["measured_epochs_completed"] >= 1
        # The steps LitGPT logged inside this segment's window carry its epochs.
        assert result["epochs"][0]["index"] > 0 and result["segment"]["in_run"] is True
        # Its workload metrics are its own steps, none from the warm-up or the cap before.
        steps = result["workload_metrics"]["steps"]
        assert steps and {s["epoch"] for s in steps} == {e["index"] for e in result["epochs"]}


def test_tensorflow_resnet50_measures_in_run_too(fake_nvidia_node, result_schema):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--impl", "tensorflow", "--preset", "tiny", "--device", "cpu",
                       "--cap", "250,350", "--order", "ascending", *FAST, "-o", str(node.results))
    assert_measured(done)
    assert set_log(node) == [250.0, 350.0, 700.0]
    results = segment_results(node)
    assert [r["spec"]["power"]["cap_w"] for r in results] == [250.0, 350.0]
    for result in results:
        assert_valid_result(result, result_schema)
        assert result["software"]["framework"] == "tensorflow"
        assert result["power"]["mean_power_w"] == pytest.approx(
            2 * result["spec"]["power"]["cap_w"], rel=0.02)
