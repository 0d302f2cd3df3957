"""Progress on long steps (issue 41, item 5): a line on a terminal's stderr,
rewritten in place, with the step and its seconds; nothing at all when stderr is
not a terminal (a pipe, a log, a batch job)."""
import io
import os
import pty
import subprocess
import time

from conftest import LAUNCHER, ROOT, FakeNode
from fakes import fake_gpu_state as fgs
from hpcai.launcher.cli.progress import CLEAR, Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_each_step_is_shown_and_the_line_erased_at_the_end():
    screen = Terminal()
    with Progress("selftest", 2, stream=screen, tick_s=0.01) as progress:
        progress.step("library")
        time.sleep(0.05)  # the ticker rewrites the line meanwhile
        progress.step("caps")
    text = screen.getvalue()
    assert f"{CLEAR}selftest [1/2] library, 0 s" in text and f"{CLEAR}selftest [2/2] caps, 0 s" in text
    assert text.count("[1/2] library") >= 2  # ticked, not only written once
    assert text.endswith(CLEAR)  # what the command prints next starts on a clean line


def test_not_on_a_terminal_nothing_is_written():
    log = io.StringIO()
    with Progress("report", 4, stream=log, tick_s=0.01) as progress:
        progress.step("reading the results")
        progress.update("still reading")
        time.sleep(0.03)
    assert log.getvalue() == ""


def _selftest(node, out, stderr):
    return subprocess.run([*LAUNCHER, "selftest", "--no-load", "--load-s", "1", "--only", "library,gpus",
                           "-o", str(out)], stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT, env=node.env,
                          timeout=300)


def test_selftest_shows_its_checks_on_a_terminal_and_nothing_in_a_pipe(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(2, "nvidia"))
    piped = _selftest(node, tmp_path / "a.json", subprocess.PIPE)
    assert piped.returncode == 0, piped.stderr
    assert b"selftest [" not in piped.stderr and b"\x1b[K" not in piped.stderr + piped.stdout
    controller, terminal = pty.openpty()
    try:
        shown = _selftest(node, tmp_path / "b.json", terminal)
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(controller)
    assert shown.returncode == 0
    assert b"selftest [1/2] library" in seen and b"selftest [2/2] gpus" in seen
    # The table goes to stdout as it did: the progress line is stderr's alone.
    assert b"selftest [" not in shown.stdout and len(shown.stdout.splitlines()) == len(piped.stdout.splitlines())
