"""The stall watchdog's parts (launcher/run/stall.py, workloads/heartbeat.py);
tests/integration/test_hung_ranks.py runs them against a stopped rank."""
from __future__ import annotations

import os
import time

from hpcai.launcher.run.stall import PROGRESS_FILE, StallWatchdog, default_timeout_s, ranks_alive
from hpcai.launcher.run.workload_log import TracebackFilter
from hpcai.workloads import heartbeat


def test_a_run_is_stalled_only_after_the_timeout_without_a_step(tmp_path):
    dog = StallWatchdog(tmp_path, 30)
    env = dog.prepare()
    assert env == {heartbeat.PROGRESS_ENV: str(tmp_path / PROGRESS_FILE)}
    assert dog.stalled() is None  # not armed: the workload has not started
    dog.arm()
    assert dog.stalled() is None
    long_ago = time.time() - 100
    dog.started = long_ago
    os.utime(tmp_path / PROGRESS_FILE, (long_ago, long_ago))
    reason = dog.stalled()
    assert reason and reason.startswith("stalled: no step progress for 100 s")
    assert "stall timeout 30 s" in reason
    os.utime(tmp_path / PROGRESS_FILE)  # a step: progress again
    assert dog.stalled() is None


def test_each_step_touches_the_progress_file_at_most_once_a_second(tmp_path, monkeypatch):
    path = tmp_path / PROGRESS_FILE
    path.touch()
    os.utime(path, (1000.0, 1000.0))
    monkeypatch.setenv(heartbeat.PROGRESS_ENV, str(path))
    monkeypatch.setattr(heartbeat, "_last", float("-inf"))
    heartbeat.beat()
    first = path.stat().st_mtime
    assert first > 1000.0
    os.utime(path, (1000.0, 1000.0))
    heartbeat.beat()  # within the second: not again
    assert path.stat().st_mtime == 1000.0


def test_a_link_planted_at_the_progress_file_leaves_the_run_without_a_watchdog(tmp_path):
    (tmp_path / PROGRESS_FILE).symlink_to(tmp_path / "elsewhere")
    dog = StallWatchdog(tmp_path, 30)
    assert dog.prepare() == {} and "File exists" in dog.problem
    dog.arm()
    dog.started = time.time() - 1000
    assert dog.stalled() is None  # never a stall it cannot measure
    assert not (tmp_path / "elsewhere").exists()


def test_default_timeouts_suit_each_preset_kind():
    assert default_timeout_s("test") == 600.0
    assert default_timeout_s("paper") == default_timeout_s("fast") == 1800.0


def test_no_rank_is_found_where_none_carries_the_tag():
    assert ranks_alive(None, "no-such-run-tag-" + os.urandom(4).hex()) == []


def test_rank_prefixed_tracebacks_stay_in_the_log():
    """torch.distributed prefixes a rank's error output: "[rank1]: Traceback ..."."""
    keep = TracebackFilter()
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/x/torch_trainer.py", line 90, in setup',
             "[rank1]:     model = DistributedDataParallel(model)",
             "[rank1]: RuntimeError: Connection closed by peer",
             "hpcai: power limits restored"]
    assert [line for line in lines if keep.show(line)] == ["hpcai: power limits restored"]
