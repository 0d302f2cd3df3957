"""`--dist loadfile`, with every service test in one unit of work.

`make test` runs the whole suite in one pytest-xdist session. Tests that use a
system service (the `system` marker, set from SERVICE_FIXTURES in conftest.py)
share fixed ports, one two-node Slurm cluster and session-scoped images, so they
must run one after another in one worker; everything else spreads by file over
the other workers and runs beside them. That overlap is the saving: the service
tests mostly wait (daemons, sbatch, a registry), so the cores they leave idle go
to the file units.

The controller decides the units from node ids alone (xdist sends no markers), so
each worker writes the ids it marked `system` to a folder the controller named
(pytest_configure_node); the controller reads them when it schedules, which xdist
does only after every worker has sent its collection. (`--dist loadgroup` with
xdist_group markers would be the documented way, but xdist 3.8 renames grouped
tests through `item._nodeid`, which pytest 9 no longer reads: the groups are
silently ignored.)

Order: the service unit first (the longest), then integration files, then unit
files, and within each the files whose tests declare the longest time-out
(`@pytest.mark.timeout`, the only length a test states) first: the slow files
start early instead of last, where one of them would leave the other workers
idle at the end.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

SERVICES = "system services (one worker, in order)"
_KEY = "hpcai_service_ids_dir"


class ServiceUnitScheduling(LoadFileScheduling):
    def __init__(self, config, log=None):
        super().__init__(config, log)
        self._folder = Path(config._hpcai_service_ids_dir)
        self._service_ids: set[str] | None = None
        self._timeouts: dict[str, float] = {}  # file: its longest declared time-out

    def schedule(self) -> None:
        if self._service_ids is None and self.collection_is_completed:
            self._service_ids, self._timeouts = set(), {}
            for written in self._folder.glob("*.json"):
                said = json.loads(written.read_text())
                self._service_ids.update(said["service"])
                self._timeouts.update(said["timeouts"])
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        if self._service_ids and nodeid in self._service_ids:
            return SERVICES
        return super()._split_scope(nodeid)

    def _assign_work_unit(self, node) -> None:
        # Before xdist pops the next unit: the longest units go out first.
        for scope in sorted(self.workqueue, key=self._rank, reverse=True):
            self.workqueue.move_to_end(scope, last=True)
        super()._assign_work_unit(node)

    def _rank(self, scope: str) -> tuple[int, float]:
        kind = 2 if scope == SERVICES else 1 if scope.startswith("tests/integration/") else 0
        return kind, self._timeouts.get(scope, 0.0)


def register(config) -> None:
    """From conftest's pytest_configure: on the controller of `--dist loadfile`."""
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") == "loadfile" \
            and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ServiceSchedulingPlugin(config), "hpcai-service-scheduling")


class ServiceSchedulingPlugin:

    def __init__(self, config):
        self.folder = tempfile.mkdtemp(prefix="hpcai-service-ids-")
        config._hpcai_service_ids_dir = self.folder

    def pytest_configure_node(self, node) -> None:
        node.workerinput[_KEY] = self.folder

    def pytest_xdist_make_scheduler(self, config, log):
        return ServiceUnitScheduling(config, log)

    def pytest_unconfigure(self, config) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def report_service_ids(config, items) -> None:
    """On a worker: say which of its tests are service tests (see the module text)."""
    folder = getattr(config, "workerinput", {}).get(_KEY)
    if not folder:
        return
    ids = [item.nodeid for item in items if item.get_closest_marker("system")]
    timeouts: dict[str, float] = {}
    for item in items:
        marker = item.get_closest_marker("timeout")
        if marker and marker.args and isinstance(marker.args[0], (int, float)):
            file = item.nodeid.split("::", 1)[0]
            timeouts[file] = max(timeouts.get(file, 0.0), float(marker.args[0]))
    worker = config.workerinput["workerid"]
    temp = Path(folder) / f".{worker}.tmp"
    temp.write_text(json.dumps({"service": ids, "timeouts": timeouts}))
    os.replace(temp, Path(folder) / f"{worker}.json")  # whole, or not there


_claimed: dict[str, int] = {}  # this worker's core, while it holds the core's lock


def core_for_worker(config, worker: str, cores: list[int]) -> int:
    """The core this worker's non-service tests are pinned to.

    Under `make test` one worker runs the service unit unpinned, so pinning by
    worker number could put both other workers on one core and leave the other to
    the (mostly waiting) service chain. Instead each worker takes the first core
    whose lock in the controller's folder is free, and keeps it; a worker that
    finds none (the service worker, once its unit is done) shares one by number."""
    if "core" in _claimed:
        return _claimed["core"]
    folder = getattr(config, "workerinput", {}).get(_KEY)
    if folder:
        for core in cores:
            fd = os.open(Path(folder) / f"core-{core}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _claimed["core"], _claimed["fd"] = core, fd  # held until the worker exits
            return core
    return cores[int(worker[2:]) % len(cores)]
