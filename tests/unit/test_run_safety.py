"""Issue 14, the deterministic parts: `power restore` and a workload that
outlived its launcher, the stale journal for uncapped runs, the lifeline,
the output folder's errors, spec and site files that are not what they
claim, and the one efficiency formula. GPU libraries are the FAKES in
tests/fakes; processes, locks, files and signals are real."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcai.errors import PowerError, StaleJournalError
from hpcai.launcher.run.lifeline import LIFELINE_ENV, TAG_ENV, Lifeline
from hpcai.launcher.power import workload_procs
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.journal import load_journal, record_workload, write_journal
from hpcai.launcher.power.session import CapSession, restore_from_journal
from hpcai.launcher.run.workload_log import TracebackFilter

from conftest import ROOT
from fakes import fake_gpu_state as fgs


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
    state = tmp_path / "gpus.json"
    fgs.install(monkeypatch, state, fgs.make_devices(2, "nvidia"))
    return state


def limits(state) -> list[float]:
    return [d["current_limit_w"] for d in fgs.read_state(state)["devices"]]


def spawn_orphan(tag: str) -> subprocess.Popen:
    """A stand-in for ranks that outlived their launcher: own session, tagged env."""
    env = dict(os.environ, **{TAG_ENV: tag})
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env,
                            start_new_session=True)


def capped_journal(tmp_path, state) -> Path:
    """What a SIGKILLed capped launcher leaves: limits at 300 W and its journal."""
    journal = tmp_path / "state" / "power-journal.json"
    uuids = [d["uuid"] for d in fgs.read_state(state)["devices"]]
    write_journal(journal, "nvml", {i: {"uuid": uuids[i], "limit_w": 700.0} for i in range(2)})
    for i in range(2):
        fgs.update_device(state, i, current_limit_w=300.0)
    return journal


def test_restore_refuses_while_the_workload_runs_and_force_stops_it_first(tmp_path, fake_gpus):
    journal = capped_journal(tmp_path, fake_gpus)
    orphan = spawn_orphan("run-under-test")
    other = spawn_orphan("someone-else")  # another run's process is left alone
    try:
        # Recorded the way the launcher does: the group (torchrun's) and the tag (every rank).
        record_workload(journal, pgid=999_999_999, tag="run-under-test")
        assert load_journal(journal)["workload"] == {"pgid": 999_999_999, "tag": "run-under-test"}
        deadline = time.time() + 10
        while orphan.pid not in workload_procs.find({"tag": "run-under-test"}):
            assert time.time() < deadline
            time.sleep(0.05)
        with make_backend("nvml") as backend:
            with pytest.raises(PowerError) as refused:
                restore_from_journal(backend, journal)
        message = refused.value.one_line()
        assert "still running" in message and str(orphan.pid) in message
        assert "--force" in message and "kill -TERM" in message
        assert limits(fake_gpus) == [300.0, 300.0] and journal.exists()  # nothing lifted

        with make_backend("nvml") as backend:
            done = restore_from_journal(backend, journal, force=True)
        assert orphan.wait(timeout=30) == -signal.SIGTERM  # stopped first, gently
        assert done["found"] and limits(fake_gpus) == [700.0, 700.0]
        assert not journal.exists()
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


def test_a_journal_stops_an_uncapped_session_too(tmp_path, fake_gpus):
    journal = capped_journal(tmp_path, fake_gpus)
    with make_backend("nvml") as backend:
        with pytest.raises(StaleJournalError) as refused:
            CapSession(backend, None, [0, 1], journal).__enter__()
    assert "power restore" in refused.value.one_line()


def test_lifeline_held_then_released_when_its_holder_dies(tmp_path):
    """The launcher side in a child process; the workload side's check here."""
    from hpcai.workloads.lifeline import Watcher

    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time\n"
                               "from hpcai.launcher.run.lifeline import Lifeline\n"
                               f"with Lifeline({str(tmp_path)!r}, 'tag') as line:\n"
                               "    print(line.environment(), flush=True)\n"
                               "    time.sleep(120)\n"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        env = eval(holder.stdout.readline())  # noqa: S307 (our own dict literal)
        assert env == {TAG_ENV: "tag", LIFELINE_ENV: str(tmp_path / ".lifeline")}
        watcher = Watcher(env[LIFELINE_ENV], log=lambda m: None)
        assert watcher.launcher_gone() is False
        holder.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        holder.wait()
        assert watcher.launcher_gone() is True
    finally:
        holder.kill()
        holder.wait()


def test_the_workload_does_not_inherit_the_lifeline(tmp_path):
    with Lifeline(tmp_path, "t") as line:
        code = ("import fcntl, os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                "try:\n    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
                "except BlockingIOError:\n    sys.exit(7)\n")
        done = subprocess.run([sys.executable, "-c", code, str(line.path)])
        assert done.returncode == 7  # held by the launcher, not shared with its child
    assert not (tmp_path / ".lifeline").exists()


def test_worker_tracebacks_stay_in_the_log():
    """tests/data/failed-run-output.txt: the workload.log of `hpcai-launch resnet50
    --preset tiny --device cpu --batch-size 100000000` (two ranks), paths shortened."""
    text = (ROOT / "tests" / "data" / "failed-run-output.txt").read_text()
    keep = TracebackFilter()
    shown = [line for line in text.splitlines() if keep.show(line)]
    assert len(text.splitlines()) >= 70
    assert all("Traceback" not in line and "File " not in line for line in shown)
    assert any("[hpcai] error: RuntimeError" in line for line in shown)
    assert len(shown) <= 3, shown  # the ranks' one-line errors, each said once


def test_interleaved_tracebacks_of_two_ranks_stay_hidden():
    """Two ranks write one log: under load their tracebacks interleave line by
    line (seen in a CI run: rank 1's header came before rank 0's exception line,
    and rank 1's frames reached the terminal)."""
    rank = ["[hpcai] error: RuntimeError: out of memory",
            "Traceback (most recent call last):",
            '  File "/x/entrypoint.py", line 10, in run',
            "    self.step()",
            "    ^^^^^^^^^^^",
            "RuntimeError: out of memory"]
    interleaved = [line for pair in zip(rank, rank) for line in pair]  # a a b b ...
    keep = TracebackFilter()
    shown = [line for line in interleaved + ["hpcai.workloads FAILED"] if keep.show(line)]
    # The second rank's error line says nothing new: shown once.
    assert shown == ["[hpcai] error: RuntimeError: out of memory", "hpcai.workloads FAILED"]
    assert keep.hidden == len(interleaved) - 1


def test_loggings_report_of_a_full_disk_stays_in_the_log():
    """A CI fault-injection round filled the disk under a workload: logging's
    Handler.handleError printed "--- Logging error ---", a traceback, the call
    stack and the message, and the last header was cut short by the full disk.
    The report here is the real one, made by Python's logging in a child."""
    code = ("import errno, logging\n"
            "class Full:\n"
            "    def write(self, s): raise OSError(errno.ENOSPC, 'No space left on device')\n"
            "    def flush(self): pass\n"
            "log = logging.getLogger('x'); log.addHandler(logging.StreamHandler(Full()))\n"
            "log.warning(':::MLLOG {\"key\": \"submission_benchmark\"}')\n"
            "print('[hpcai] epoch 2: 20 images/s', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    report = done.stderr.splitlines()
    assert report[0] == "--- Logging error ---" and any(x.startswith("Arguments: ") for x in report)
    lines = report + done.stdout.splitlines() + ["--- Logging error ---", "Traceback (most recent call last"]
    keep = TracebackFilter()
    shown = [line for line in lines if keep.show(line)]
    assert shown == ["[hpcai] epoch 2: 20 images/s"]
    assert keep.hidden == len(lines) - 1


def test_a_traceback_header_cut_short_still_opens_a_traceback():
    keep = TracebackFilter()
    lines = ["Traceback (most recent call last", '  File "/x/entrypoint.py", line 10, in run',
             "OSError: [Errno 28] No space left on device", "hpcai: power limits restored"]
    assert [line for line in lines if keep.show(line)] == ["hpcai: power limits restored"]


def test_each_ranks_own_error_shows_and_a_repeat_does_not():
    """Every rank of a run planned on GPUs that PyTorch cannot see says so, word
    for word: once on the terminal. Errors that differ all show."""
    keep = TracebackFilter()
    lines = ["[rank0]: [hpcai] error: this run is planned on the GPUs, but PyTorch sees none",
             "[rank1]: [hpcai] error: this run is planned on the GPUs, but PyTorch sees none",
             "[hpcai] error: RuntimeError: rank 1 ran out of memory"]
    assert [keep.show(line) for line in lines] == [True, False, True]
    assert keep.hidden == 1


# ---- one efficiency formula, node overhead 0 W included -----------------------------
def test_zero_node_overhead_is_a_value_and_result_and_report_agree():
    from hpcai.gpu.base import GpuReading
    from hpcai.launcher.report.load import Run
    from hpcai.workloads import result as R
    from hpcai.measure.telemetry import Mark, Sampler

    class Package:  # a RAPL domain as power_sources.discover returns it
        name, path = "package-0", Path("/sys/class/powercap/intel-rapl:0")

    class Discovery:
        kind, rapl, gpus, vendor = "rapl", [Package()], [], None

    sampler = Sampler(sources=[object()], interval_s=0.1)
    sampler.times = [0.0, 1.0, 2.0]
    sampler.readings = [[GpuReading(power_w=100.0)] for _ in range(3)]
    sampler.marks = [Mark("start", 0.0, [1000.0]), Mark("end", 2.0, [1200.0])]
    spec = {"power": {"node_overhead_w": 0.0}, "devices": {"gpu_indices": None},
            "protocol": {"telemetry": True}}
    _, _, power = R.power_section(spec, Discovery(), sampler, (0.0, 2.0), 400)
    assert power["energy_j"] == pytest.approx(200.0)
    assert power["units_per_joule_with_overhead"] == pytest.approx(2.0)  # was None
    assert power["energy_with_overhead_j"] == pytest.approx(200.0)
    run = Run(Path("r"), "r", "complete", power_available=True, energy_j=power["energy_j"],
              window_s=power["window_s"], node_overhead_w=0.0, units=400)
    assert run.efficiency() == pytest.approx(power["units_per_joule_with_overhead"])
    assert run.efficiency(100.0) == pytest.approx(400 / (200 + 100 * 2))


# ---- input that is not what it claims ----------------------------------------------
@pytest.mark.parametrize("text, fragment", [
    ("{}", "key 'run_id' is missing"),
    ("[]", "JSON list, not an object"),
    ('{"run_id": "r", "workload": "resnet50"}', "key 'preset' is missing"),
])
def test_a_spec_that_is_not_a_run_spec_is_one_line(tmp_path, text, fragment):
    (tmp_path / "spec.json").write_text(text)
    done = subprocess.run([sys.executable, "-m", "hpcai.workloads", "run", "--spec",
                           str(tmp_path / "spec.json")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcai: error: run spec "), done.stderr
    assert fragment in lines[0]


def test_a_site_file_with_non_utf8_bytes_is_one_line(tmp_path):
    site = tmp_path / "bad.toml"
    site.write_bytes(b'description = "caf\xe9"\n')
    done = subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", "info", "--site",
                           str(site)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcai-launch: error: "), done.stderr
    assert "not UTF-8" in lines[0] and "byte 18" in lines[0]  # after `description = "caf`


# ---- the output folder -----------------------------------------------------------------
def test_results_are_written_with_the_users_umask(tmp_path):
    from hpcai.result_document import write_json_atomic

    old = os.umask(0o027)
    try:
        write_json_atomic(tmp_path / "result.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "result.json").stat().st_mode & 0o777 == 0o640  # was 0600


def test_a_failed_first_write_leaves_no_file(tmp_path, monkeypatch):
    import errno

    from hpcai import result_document
    from hpcai.launcher.run import output_check

    real = result_document.write_json_atomic

    def full_after_spec(path, doc):
        if Path(path).name == "result.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, doc)

    monkeypatch.setattr(result_document, "write_json_atomic", full_after_spec)
    with pytest.raises(output_check.OutputError) as failed:
        output_check.first_write(tmp_path / "run", {"spec": 1}, {"status": "running"})
    line = failed.value.one_line()
    assert str(tmp_path / "run") in line and "Errno 28 ENOSPC" in line
    assert not (tmp_path / "run").exists()  # no empty spec.json, no empty folder


def test_too_little_free_space_refuses_before_anything(tmp_path):
    from hpcai.launcher.run import output_check

    with pytest.raises(output_check.OutputError) as refused:
        output_check.check_free_space(tmp_path / "results", 1e15)
    assert "MB free" in refused.value.one_line() and "min_free_mb" in refused.value.one_line()
    output_check.check_free_space(tmp_path / "results", 0)


# ---- sweeps: the idle baseline ---------------------------------------------------------
def test_an_idle_baseline_on_busy_gpus_is_invalid(fake_gpus):
    from hpcai.launcher.sweep.idle import measure_idle

    fgs.update_device(fake_gpus, 1, utilization_pct=87.0)  # someone's job on GPU 1
    busy = measure_idle("nvidia", [0, 1], 0.5, 0.05)
    assert busy["available"] is False and "GPU 1 at 87%" in busy["reason"]
    fgs.update_device(fake_gpus, 1, utilization_pct=0.0)
    idle = measure_idle("nvidia", [0, 1], 0.5, 0.05)
    assert idle["available"] is True and idle["total_power_w"] > 0


def test_an_idle_baseline_while_another_run_holds_the_gpus_is_not_available(fake_gpus):
    """Another run holds GPU 1 (the node's authority) but reads 0% utilisation in a
    pause: the baseline is not stored as available."""
    from hpcai.launcher.power.authority import GpuAuthority
    from hpcai.launcher.sweep.idle import measure_idle

    uuid = fgs.read_state(fake_gpus)["devices"][1]["uuid"]
    with GpuAuthority([uuid], "the-other-run"):
        held = measure_idle("nvidia", [0, 1], 0.5, 0.05)
    assert held["available"] is False
    assert "GPU 1 was held by another run" in held["reason"] and "the-other-run" in held["reason"]
    assert measure_idle("nvidia", [0, 1], 0.5, 0.05)["available"] is True


def test_the_lifeline_reaches_inside_a_container(tmp_path):
    """Apptainer runs with --cleanenv: only APPTAINERENV_* variables get inside."""
    with Lifeline(tmp_path, "t") as line:
        env = line.environment(container=True)
    assert env[f"APPTAINERENV_{LIFELINE_ENV}"] == env[LIFELINE_ENV] == str(tmp_path / ".lifeline")
    assert env[f"APPTAINERENV_{TAG_ENV}"] == env[TAG_ENV] == "t"


def test_a_result_its_launcher_never_finished_is_not_counted(tmp_path):
    """The workload wrote `complete` as its launcher was killed: no cap check, no
    `launcher` block; the report lists it with why, and measures nothing from it."""
    from hpcai.launcher.report.load import read_runs

    from report_docs import make_result, write_result

    finished = make_result(cap_w=350.0, run_id="finished")
    orphaned = make_result(cap_w=350.0, run_id="orphaned")
    del orphaned["launcher"]
    write_result(tmp_path, finished)
    write_result(tmp_path, orphaned)
    runs = {run.run_id: run for run in read_runs([tmp_path])[0]}
    assert runs["finished"].usable
    assert not runs["orphaned"].usable
    assert "launcher's finishing step" in runs["orphaned"].problems[0]


DAEMON = """
import os, sys
pidfile = sys.argv[1]
if os.fork() == 0:          # a daemon: its own session, an empty environment
    os.setsid()
    if os.fork() == 0:
        with open(pidfile, "w") as fh:
            fh.write(str(os.getpid()))
        os.execve("/bin/sleep", ["sleep", "300"], {})
    os._exit(0)
os.wait()
while not os.path.exists(pidfile) or not open(pidfile).read():
    pass
print("started a daemon", flush=True)
"""


def test_a_daemon_with_a_cleared_environment_does_not_outlive_an_exec_run(cpu_node, tmp_path):
    """No tag in its environment, a session of its own, re-parented away from the
    workload: the kernel's process tree (the launcher is the subreaper) still finds
    it; it is stopped before the run ends and the result says so."""
    from conftest import pid_alive

    pidfile = tmp_path / "daemon.pid"
    done = cpu_node.launch("exec", "-o", str(cpu_node.results), "--", sys.executable, "-c", DAEMON,
                           str(pidfile), timeout=300)
    daemon = int(pidfile.read_text())
    try:
        assert done.returncode == 0, done.stderr
        assert not pid_alive(daemon)
        (result,) = [json.loads(p.read_text()) for p in cpu_node.results.rglob("result.json")]
        outlived = result["launcher"]["outlived_processes"]
        assert [e["pid"] for e in outlived] == [daemon] and outlived[0]["command"] == "sleep 300"
        assert "outlived the workload" in done.stderr
    finally:
        if pid_alive(daemon):
            os.kill(daemon, signal.SIGKILL)
