"""In-run sweeps of a program's own windows (workloads/window_segments.py and
the API's side in hpcai/measure/api.py), without a launcher: the gate's
handshake, the events read as they grow, and which sweeps go in-run."""
import json
import threading
import time
import types

import pytest

from hpcai.errors import WorkloadError
from hpcai.launcher.sweep.inrun_support import adaptive_supported, supported
from hpcai.measure import api
from hpcai.workloads import window_segments as W


def test_events_are_read_as_they_grow_and_a_torn_line_waits(tmp_path):
    path = tmp_path / "events.jsonl"
    assert W.read_new_lines(path, 0) == ([], 0)  # not written yet
    path.write_text('{"event": "window", "start": 1}\n{"event": "win')
    lines, offset = W.read_new_lines(path, 0)
    assert lines == ['{"event": "window", "start": 1}'] and offset == 32
    with open(path, "a") as f:
        f.write('dow", "start": 2}\n')
    lines, offset = W.read_new_lines(path, offset)
    assert [W.window_event(line)["start"] for line in lines] == [2]
    assert W.window_event('{"event": "end"}') is None and W.window_event("torn{") is None


class FakeChannel:
    """The launcher's answers (launcher/sweep/inrun.py Segments writes these), in order."""

    def __init__(self, answers):
        self.answers, self.asked = list(answers), []

    def ask(self, k):
        self.asked.append(k)
        return self.answers.pop(0)


def fake_run():
    return types.SimpleNamespace(spec={"run_id": "p", "inrun": {"channel": "control"}},
                                 measurer=types.SimpleNamespace(segment=None),
                                 progress=types.SimpleNamespace(epochs=[]), segment=None,
                                 closed=[], _close_segment=None)


def test_the_gate_opens_a_segment_per_window_and_says_when_the_caps_run_out():
    run = fake_run()
    run._close_segment = lambda measurement, status, error: (
        run.closed.append((run.segment["index"], measurement["window"]["mode"], status)),
        setattr(run, "segment", None))
    channel = FakeChannel([{"segment": 0, "done": False, "cap_w": 200, "enforced_w": {"0": 200},
                            "spec": {"run_id": "s0", "output_dir": "/x/s0"}},
                           {"segment": 1, "done": True}])
    gate = W.Gate(run, channel, segments=1)
    reply = gate.open()
    assert reply == {"measure": True, "segment": 0, "cap_w": 200, "enforced_w": {"0": 200}}
    assert run.segment["spec"]["run_id"] == "s0" and "inrun" not in run.segment["spec"]
    assert run.measurer.segment == 1
    gate.close(5)  # another segment's window: nothing closes
    assert run.closed == []
    gate.close(0)
    assert run.closed == [(0, "fixed", "complete")] and run.segment is None
    assert gate.open() == {"measure": False, "segment": None}
    assert gate.open() == {"measure": False, "segment": None}  # the launcher is not asked again
    assert channel.asked == [0, 1]
    gate.finish()  # every cap measured: no complaint


def test_fewer_windows_than_caps_is_a_one_line_failure():
    gate = W.Gate(fake_run(), FakeChannel([]), segments=3)
    with pytest.raises(WorkloadError) as caught:
        gate.finish()
    assert "measured 0 window(s) and the sweep has 3 cap(s)" in caught.value.one_line()


def test_a_launcher_error_stops_the_program_window():
    gate = W.Gate(fake_run(), FakeChannel([{"segment": 0, "error": "cap 900 W out of range"}]), 2)
    with pytest.raises(WorkloadError, match="could not start segment 0: cap 900 W"):
        gate.open()


def test_a_measured_window_waits_for_its_cap_and_carries_its_segment(tmp_path, monkeypatch):
    gate, events = tmp_path / "gate", tmp_path / "events.jsonl"
    gate.mkdir()
    monkeypatch.setenv(api.EVENTS_ENV, str(events))
    monkeypatch.setenv(api.GATE_ENV, str(gate))
    monkeypatch.setattr(api, "_REPORTER", api._Reporter())
    answered = []

    def launcher():  # the engine's side: answer window 0 after a while
        while not W.requested(gate, 0):
            time.sleep(0.01)
        time.sleep(0.2)
        answered.append(time.time())
        W.answer(gate, 0, {"measure": True, "segment": 0, "cap_w": 200})

    helper = threading.Thread(target=launcher)
    helper.start()
    with api.window("warm", warmup=True):  # warm-up windows never wait
        pass
    assert not W.requested(gate, 0)
    with api.window("solve"):
        api.step(3)
    helper.join()
    warm, solve = [json.loads(line) for line in events.read_text().splitlines()]
    assert "segment" not in warm and solve["segment"] == 0 and solve["units"] == 3
    assert solve["start"] >= answered[0]  # the window's clock started under its cap


def test_exec_goes_in_run_only_with_api():
    assert supported("exec", None, {"api": True}) is None
    assert "only with --api" in supported("exec", None, {"api": False})
    assert adaptive_supported("exec", None) is not None  # the program's windows are its own


def test_a_window_ended_by_an_exception_never_files_its_segment_complete():
    run = fake_run()
    run._close_segment = lambda measurement, status, error: (
        run.closed.append((run.segment["index"], status, error and error["message"])),
        setattr(run, "segment", None))
    answer = {"done": False, "cap_w": 200, "spec": {"run_id": "s", "output_dir": "/x"}}
    gate = W.Gate(run, FakeChannel([{**answer, "segment": 0}, {**answer, "segment": 1}]), 2)
    gate.open()
    gate.close(0, aborted=True)  # the program raised inside the window
    assert run.closed == [] and run.segment["index"] == 0
    gate.open()  # ... caught it and opened the next window: segment 0 fails first
    assert run.closed == [(0, "failed", "the program's window ended with an exception "
                                        "(see workload.log)")]
    assert run.segment["index"] == 1


def test_the_api_marks_a_window_an_exception_ended(tmp_path, monkeypatch):
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv(api.EVENTS_ENV, str(events))
    monkeypatch.delenv(api.GATE_ENV, raising=False)
    monkeypatch.setattr(api, "_REPORTER", api._Reporter())
    with pytest.raises(RuntimeError):
        with api.window("solve"):
            api.step(2)
            raise RuntimeError("the solver diverged")
    with api.window("solve"):
        api.step(2)
    broken, fine = [json.loads(line) for line in events.read_text().splitlines()]
    assert broken["aborted"] is True and "aborted" not in fine
