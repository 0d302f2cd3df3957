"""Child processes of an engine-driven workload (an inference server, its
benchmark client): started in their own process group with their output in
a log file, and always stopped as a group: SIGTERM, then SIGKILL after a
grace period.

Own process group: a Ctrl-C in the terminal reaches the entrypoint only,
which then stops the server in order instead of racing it; the whole group
(a server's scheduler and detokenizer processes too) is stopped together.
Should the entrypoint itself die without cleaning up (SIGKILL), the kernel
sends the group leader SIGTERM (prctl PR_SET_PDEATHSIG, Linux), so no server
outlives the run holding the GPUs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from hpcai.errors import Interrupted, WorkloadError
from hpcai.safe_files import open_append
from hpcai.signals import deferred_signals

LINE_PIECE = 64 * 1024  # bytes of a command's output read (and kept) at once

# Runs before the real command: ask the kernel for SIGTERM when the parent
# dies (kept across exec), then become the command.
_PDEATHSIG_SHIM = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)  # the parent is already gone\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class GroupProcess:
    """One command in its own process group, output (stdout and stderr) to a log."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict | None = None,
                 stop_grace_s: float = 30.0):
        self.name, self.command, self.log_path = name, list(command), Path(log_path)
        self.env = env
        self.stop_grace_s = stop_grace_s
        self.proc: subprocess.Popen | None = None
        self.line_times: list[tuple[float, str]] = []  # (time.time(), line) for watched lines
        self._reader: threading.Thread | None = None

    def start(self, watch: tuple[str, ...] = ()) -> None:
        """Start; lines containing any of `watch` are timestamped on arrival."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        wrapped = [sys.executable, "-c", _PDEATHSIG_SHIM, str(os.getpid()), *self.command]
        self.proc = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env,
                                     start_new_session=True)
        self._reader = threading.Thread(target=self._copy_output, args=(watch,),
                                        name=f"{self.name}-log", daemon=True)
        self._reader.start()

    def _copy_output(self, watch: tuple[str, ...]) -> None:
        try:
            log = open_append(self.log_path)  # never through a planted link
        except OSError as exc:  # a link planted at the name: the output is still drained
            print(f"[hpcai] {self.name}: output not logged: cannot open {self.log_path} "
                  f"({exc.strerror})", file=sys.stderr, flush=True)
            log = open(os.devnull, "ab")
        with log:
            # At most LINE_PIECE bytes at once: a 300 MB line without a newline is copied
            # in pieces, never held whole (the log still gets every byte).
            for raw in iter(lambda: self.proc.stdout.readline(LINE_PIECE), b""):
                now = time.time()
                log.write(raw)
                log.flush()
                if watch:
                    line = raw.decode("utf-8", "replace")
                    if any(w in line for w in watch):
                        self.line_times.append((now, line.rstrip("\n")))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the leader and the end of its output."""
        code = self.proc.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return code

    def first_time(self, text: str) -> float | None:
        return next((t for t, line in self.line_times if text in line), None)

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL to what is left after the grace period.

        Another SIGTERM or Ctrl-C meanwhile does not cut this short; it is
        raised (as Interrupted) once the group is gone."""
        if self.proc is None:
            return
        with deferred_signals() as received:
            self._stop_group()
        if received:
            raise Interrupted(received[0])

    def _stop_group(self) -> None:
        pgid = self.proc.pid  # leader of its own session: pgid == pid
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_grace_s
            while _group_alive(pgid) and time.monotonic() < deadline:
                self.proc.poll()  # reap the leader as soon as it exits
                time.sleep(0.1)
            if _group_alive(pgid):
                with open_append(self.log_path) as log:
                    log.write(f"[hpcai] {self.name} still running {self.stop_grace_s:g} s after "
                              "SIGTERM: sending SIGKILL\n".encode())
                _signal_group(pgid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._reader is not None:
            self._reader.join(timeout=5)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any process (other than zombies) is left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_state(pid) not in ("Z", None) for pid in _group_members(pgid))


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:  # stat field 5: pgrp
                members.append(int(entry.name))
    return members


def _state(pid: int) -> str | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


# The servers listen on loopback: no site proxy (http_proxy) may stand in between.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url: str, timeout_s: float = 5.0) -> dict:
    with _DIRECT.open(url, timeout=timeout_s) as response:
        return json.loads(response.read().decode("utf-8"))


def post_json(url: str, payload: dict, timeout_s: float) -> dict:
    request = urllib.request.Request(url, data=json.dumps(payload).encode("utf-8"),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with _DIRECT.open(request, timeout=timeout_s) as response:
        return json.loads(response.read().decode("utf-8"))


def wait_until_ready(server: GroupProcess, url: str, timeout_s: float, what: str,
                     note: str | None = None) -> dict:
    """Polls url until it answers 200 with JSON; fails at once if the server exits."""
    deadline = time.monotonic() + timeout_s
    note = f"; {note}" if note else ""
    while True:
        code = server.poll()
        if code is not None:
            raise WorkloadError(f"{what} exited with code {code} before it was ready",
                                f"see its log: {server.log_path}{note}")
        try:
            return get_json(url, timeout_s=5.0)
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            raise WorkloadError(f"{what} was not ready after {timeout_s:g} s",
                                f"see its log: {server.log_path}; a slow model load needs a "
                                f"longer --server-timeout{note}")
        time.sleep(0.5)
