"""report/forked.py: a call made in a forked child (the whole report, and its
figures), its value, exception and printed output back in the parent, and no
child left behind when the parent stops wanting it or dies."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hpcai.errors import UsageError
from hpcai.launcher.report.forked import FORK_ENV, Claim, ForkedCall, Inbox, WorkerDied


def _pid():
    return os.getpid()


def _fail():
    raise UsageError("a bad folder", "give another")


def _die_unless(parent):
    if os.getpid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return "made here"


def _speak():
    print("to stdout")
    print("to stderr", file=sys.stderr)
    return "done"


class _OddError(Exception):
    """Pickles, but cannot be unpickled: its __init__ wants two arguments."""

    def __init__(self, what, why):
        super().__init__(f"{what} because {why}")


def _odd():
    raise _OddError("broke", "of its arguments")


def _twice(inbox):
    return 2 * inbox.receive()


def _first_then_second(first, second, go):
    """Takes the first value, waits until the parent is past sending the second."""
    a = first.receive()
    while not os.path.exists(go):
        time.sleep(0.01)
    return a + second.receive()


def _alive(pid):
    """Running: not gone, and not a zombie its new parent has yet to reap."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_call_is_made_in_a_child_and_its_value_comes_back():
    assert ForkedCall(_pid).result() not in (os.getpid(), None)


def test_without_fork_the_call_is_made_here(monkeypatch):
    monkeypatch.setenv(FORK_ENV, "0")
    assert ForkedCall(_pid).result() == os.getpid()


def test_an_error_in_the_child_is_raised_here_with_its_hint():
    with pytest.raises(UsageError) as raised:
        ForkedCall(_fail).result()
    assert raised.value.one_line() == "a bad folder: give another"


def test_a_killed_child_leaves_the_call_to_this_process():
    assert ForkedCall(_die_unless, os.getpid()).result() == "made here"


def test_a_child_killed_without_retry_says_how_it_ended():
    with pytest.raises(WorkerDied) as raised:
        ForkedCall(_die_unless, os.getpid(), retry=False).result()
    assert "killed by SIGKILL (out of memory?)" in raised.value.one_line()
    assert raised.value.exit_code != 0


def test_what_the_child_prints_is_printed_by_the_parent(capsys):
    assert ForkedCall(_speak, capture=True).result() == "done"
    out, err = capsys.readouterr()  # sys.stdout replaced: the child's copy would be lost
    assert (out, err) == ("to stdout\n", "to stderr\n")


def test_an_exception_that_cannot_come_back_as_itself_comes_back_as_its_text():
    with pytest.raises(RuntimeError, match="_OddError: broke because of its arguments"):
        ForkedCall(_odd).result()


def test_a_value_sent_after_the_fork_reaches_the_child():
    inbox = Inbox()
    call = ForkedCall(_twice, inbox, inbox=inbox)
    inbox.send(21)
    assert call.result() == 42
    inbox.close()


@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_value_beyond_a_pipes_buffer_reaches_the_call(monkeypatch, fork):
    # With no child (fork "0") nothing reads the pipe: the value must not be written
    # to it, or send blocks for ever once its buffer (64 KiB) is full.
    monkeypatch.setenv(FORK_ENV, fork)
    inbox = Inbox()
    call = ForkedCall(_twice, inbox, inbox=inbox)
    inbox.send("x" * 1_000_000)
    assert call.result() == "x" * 2_000_000
    inbox.close()


@pytest.mark.timeout(60)  # a send that waits for the reader never returns
@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_second_value_is_sent_while_the_child_is_still_busy(tmp_path, monkeypatch, fork):
    # The child reads the second value only after the parent says it sent it: a send
    # that waited for the reader (1 MB, beyond the pipe's 64 KiB) would never return.
    monkeypatch.setenv(FORK_ENV, fork)
    first, second, go = Inbox(), Inbox(), tmp_path / "go"
    call = ForkedCall(_first_then_second, first, second, str(go), inbox=(first, second))
    first.send("a")
    second.send("b" * 1_000_000)
    go.touch()
    assert call.result() == "a" + "b" * 1_000_000
    first.close()
    second.close()


def test_a_stopped_child_leaves_no_sender_waiting():
    first = Inbox()
    call = ForkedCall(time.sleep, 120, inbox=first)
    first.send("c" * 1_000_000)  # nobody reads it
    call.close()
    first.close()  # the writer thread saw the pipe break and ended
    assert first._writer is None


def test_close_stops_a_child_still_working():
    call = ForkedCall(time.sleep, 120)
    pid = call._pid
    assert pid is not None and _alive(pid)
    call.close()
    assert not _alive(pid)  # killed and reaped


def test_the_child_dies_with_its_parent(tmp_path):
    # A parent that forks a long call and then vanishes without cleaning up.
    script = textwrap.dedent(f"""
        import os, time
        from hpcai.launcher.report.forked import ForkedCall
        call = ForkedCall(time.sleep, 120)
        open({str(tmp_path / "pid")!r}, "w").write(str(call._pid))
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    child = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 60  # a loaded machine may take a while to deliver it
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_a_report_made_in_one_process_is_the_forked_report(tmp_path, monkeypatch):
    # Every plot and table is the same whether or not a worker drew it.
    import json

    from report_docs import crafted_set

    from hpcai.launcher.report import ReportOptions, make_report

    crafted_set(tmp_path / "results")
    written = {}
    for fork in ("1", "0"):
        monkeypatch.setenv(FORK_ENV, fork)
        out = tmp_path / f"out-{fork}"
        made = make_report([tmp_path / "results"], ReportOptions(output=out, reference=True))
        doc = json.loads((out / "report.json").read_text())
        doc.pop("generated")
        written[fork] = (doc, sorted(p.name for p in (out / "plots").iterdir()), made["runs"])
    assert written["1"] == written["0"]
    assert written["1"][1]  # plots were drawn


@pytest.mark.parametrize("child_first", [True, False])
def test_a_claim_is_taken_by_exactly_one_of_the_two_processes(child_first):
    claim = Claim()
    try:
        if child_first:
            took_in_child = ForkedCall(claim.take).result()
            assert took_in_child is True and claim.take() is False
        else:
            assert claim.take() is True
            assert ForkedCall(claim.take).result() is False
        assert claim.take() is False  # and never again, here or there
        assert ForkedCall(claim.take).result() is False
    finally:
        claim.close()
    assert claim.take() is False  # closed: taken by no one
