"""The control channel of an in-run sweep: files in the run folder.

The workload's node leader writes `control/request-K.json` when it is ready for
segment K; its own node's launcher sets that segment's cap, reads back the
enforced limit and writes `control/answer-K.json`. Plain files in the run
folder work wherever the run folder does: through Apptainer's bind of it, and
under Slurm, where every node has its own launcher and its own run folder.
Each file is written atomically (rename), so a reader never sees half of one.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hpcai.errors import WorkloadError

CONTROL_DIR = "control"
# The launcher answers within a second; this long without one, it is stuck.
ANSWER_TIMEOUT_S = 600.0
POLL_S = 0.05


def request_path(folder: Path, segment: int) -> Path:
    return Path(folder) / f"request-{segment}.json"


def answer_path(folder: Path, segment: int) -> Path:
    return Path(folder) / f"answer-{segment}.json"


def write_atomic(path: Path, doc: dict) -> None:
    from hpcai.result_document import write_json_atomic

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, doc)


def read(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return None


class Channel:
    """The workload's end: ask for segment K and wait for the launcher's answer."""

    def __init__(self, folder: Path, timeout_s: float = ANSWER_TIMEOUT_S):
        self.folder = Path(folder)
        self.timeout_s = timeout_s

    def ask(self, segment: int) -> dict:
        write_atomic(request_path(self.folder, segment),
                     {"segment": segment, "pid": os.getpid(), "time": time.time()})
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = read(answer_path(self.folder, segment))
            if answer is not None:
                return answer
            if time.monotonic() > deadline:
                raise WorkloadError(
                    f"the launcher did not answer segment {segment}'s request in "
                    f"{self.timeout_s:g} s ({self.folder})",
                    "check that the launcher still runs; see its output")
            time.sleep(POLL_S)
