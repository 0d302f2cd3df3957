"""The sweep's summary file (`sweep.json`).
"""
from __future__ import annotations

import json
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai.errors import ResultError
from hpcai.launcher.run.options import log
from hpcai.launcher.sweep.resume import attempts, run_slot

SUMMARY_FILE = "sweep.json"
SUMMARY_VERSION = 1


class Summary:
    """`sweep.json`: the plan, the order, the idle baseline and every run's status."""

    def __init__(self, path: Path, doc: dict):
        self.path, self.doc = path, doc

    @classmethod
    def load(cls, path: Path) -> Summary | None:
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ResultError(f"{path} is not a readable sweep summary ({exc})",
                              "move it aside and run the sweep again") from None
        return cls(Path(path), doc)

    def write(self, quiet: bool = False) -> None:
        """quiet: on the way out of an error, say a failed write in one line and go on
        (the error being raised matters more; the summary keeps its last state)."""
        from hpcai.launcher.run.output_check import write_error
        from hpcai.result_document import write_json_atomic

        self.doc["updated"] = now_iso()
        try:
            write_json_atomic(self.path, self.doc)
        except OSError as exc:
            error = write_error(self.path.parent, exc, "the sweep summary",
                                "free space or make the folder writable, then run the "
                                "same command again")
            if not quiet:
                raise error from None
            log(f"{error.message}; {self.path} keeps its last state")

    def refresh_attempts(self) -> None:
        found = attempts(self.path.parent, self.doc["key"])
        for run in self.doc["runs"]:
            run["attempts"] = found.get(run_slot(run), [])

    def set_run(self, position: int, quiet: bool = False, **fields) -> None:
        self.doc["runs"][position].update(fields)
        self.doc["counts"] = _counts(self.doc["runs"])
        self.write(quiet)


def _counts(runs: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for run in runs:
        counts[run["status"]] = counts.get(run["status"], 0) + 1
    return counts


