"""The workload's side of the launcher's lifeline (launcher/run/lifeline.py).

A thread polls the lock the launcher holds; when the lock can be taken, the
launcher is gone (killed, or its node agent died), so this process sends
itself SIGTERM: the entrypoint stops, writes an `interrupted` result with the
reason, and exits. If it has not exited after STOP_GRACE_S, it exits hard:
a workload must not run on under limits nobody will restore.
"""
from __future__ import annotations

import fcntl
import os
import signal
import threading

LIFELINE_ENV = "HPCAI_LIFELINE"
POLL_S = 0.5
STOP_GRACE_S = 60.0


class Watcher:
    def __init__(self, path: str, log):
        self.path = path
        self.log = log
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpcai-lifeline", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def launcher_gone(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True  # the launcher removes it only after its workload exited
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # held: the launcher lives
        finally:
            os.close(fd)  # drops a shared lock we may have taken
        return True

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                gone = self.launcher_gone()
            except OSError as exc:
                self.log(f"cannot watch the launcher's lifeline {self.path} ({exc}); "
                         "running without it")
                return
            if gone:
                break
        else:
            return
        self.reason = "the launcher is gone (killed?): stopped so no limit is left unguarded"
        self.log(self.reason)
        os.kill(os.getpid(), signal.SIGTERM)
        if not self._stop.wait(STOP_GRACE_S):
            os._exit(137)


def watch(log) -> Watcher | None:
    """Start watching when the launcher gave a lifeline (not for a bare spec run)."""
    path = os.environ.get(LIFELINE_ENV)
    return Watcher(path, log).start() if path else None
