"""The tests' own process handling (tests/processes.py): children get the
default SIGHUP even when the suite runs under nohup, and teardown stops every
process a test started, including an orphan in a session of its own."""
import signal
import subprocess
import sys
import time

from processes import kill_marked, marked_pids, new_mark, popen_options


def test_a_child_gets_the_default_sighup_when_the_suite_ignores_it():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        done = subprocess.run([sys.executable, "-c",
                               "import signal; print(signal.getsignal(signal.SIGHUP).name)"],
                              capture_output=True, text=True, timeout=60,
                              **popen_options({}, new_mark()))
        plain = subprocess.run([sys.executable, "-c",
                                "import signal; print(signal.getsignal(signal.SIGHUP).name)"],
                               capture_output=True, text=True, timeout=60)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert done.stdout.strip() == "SIG_DFL"
    assert plain.stdout.strip() == "SIG_IGN"  # what the suite failed on


def test_teardown_kills_an_orphan_that_left_its_session():
    mark = new_mark()
    script = ("import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
              " start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              "print(p.pid, flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, **popen_options({"PATH": "/usr/bin:/bin"}, mark))
    orphan = int(done.stdout)
    deadline = time.monotonic() + 10
    while orphan not in marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert orphan in marked_pids(mark)  # its parent is gone; the mark still finds it
    assert orphan in kill_marked(mark)
    assert marked_pids(mark) == [] or all(_zombie(p) for p in marked_pids(mark))


def _zombie(pid):
    from pathlib import Path
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
