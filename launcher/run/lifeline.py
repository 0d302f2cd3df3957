"""The workload's lifeline: it must never outlive its launcher.

The launcher holds an exclusive lock on a file in the run folder for as long
as it lives; the kernel drops the lock when the launcher dies, however it
dies (SIGKILL included). Every workload process polls the file
(hpcai/workloads/lifeline.py): when it can take the lock, the launcher is
gone and the workload stops, writes an `interrupted` result, and exits.

A file lock, not a pipe or PR_SET_PDEATHSIG: torchrun closes inherited file
descriptors and starts its workers in new sessions, and Apptainer or srun sit
in between; an environment variable and a path in the (bound) run folder
reach every rank through all of them.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

LIFELINE_ENV = "HPCAI_LIFELINE"
# Every workload process carries this in its environment, so `power restore`
# finds ranks that left the launcher's process group (torchrun's new sessions).
TAG_ENV = "HPCAI_WORKLOAD_TAG"
FILE = ".lifeline"


class Lifeline:
    """Held (locked) from before the workload starts until after it exited."""

    def __init__(self, run_dir: Path, tag: str):
        self.path = Path(run_dir) / FILE
        self.tag = tag
        self._fd: int | None = None
        self.problem: str | None = None

    def __enter__(self) -> Lifeline:
        try:
            # O_CLOEXEC (Python's default): the workload must not inherit the lock.
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
                               | os.O_NOFOLLOW, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:  # a filesystem without locks: run without a lifeline
            self.problem = f"{self.path}: {exc.strerror or exc}"
            self._close()
        return self

    def environment(self, container: bool = False) -> dict[str, str]:
        """For the workload's environment; in a container (--cleanenv) also as
        APPTAINERENV_*, which is what reaches the processes inside."""
        env = {TAG_ENV: self.tag}
        if self._fd is not None:
            env[LIFELINE_ENV] = str(self.path)
        if container:
            env.update({f"APPTAINERENV_{k}": v for k, v in env.items()})
        return env

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __exit__(self, *exc) -> bool:
        if self._fd is not None:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass
        self._close()
        return False
