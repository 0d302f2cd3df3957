"""Shared fixtures. GPU management libraries are FAKES (tests/fakes), put in
front of the real ones at their module boundary; everything else is real.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKES = ROOT / "tests" / "fakes"
sys.path.insert(0, str(FAKES.parent))  # `from fakes import fake_gpu_state`

from fakes import fake_gpu_state  # noqa: E402
from processes import kill_marked, new_mark, popen_options  # noqa: E402
import service_scheduling  # noqa: E402

LAUNCHER = [sys.executable, "-m", "hpcai.launcher.cli"]

# Fixtures that start or need a system service, installed by `make setup-system`:
# their tests carry that service's marker and `system`, which `make test-fast`
# deselects (a non-root developer without them) and `make test` runs (they fail,
# never skip, when the service is missing there).
SERVICE_FIXTURES = {"chromium": "chromium", "apptainer_exe": "apptainer",
                    "tiny_image": "apptainer", "cpu_cv_image": "apptainer",
                    "registry": "registry", "slurm_cluster": "slurm", "ipmi_bmc": "ipmi",
                    "prometheus_server": "prometheus"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        services = {SERVICE_FIXTURES[f] for f in item.fixturenames if f in SERVICE_FIXTURES}
        for service in sorted(services):
            item.add_marker(getattr(pytest.mark, service))
        if services:
            item.add_marker(pytest.mark.system)
    service_scheduling.report_service_ids(config, items)


def pytest_configure(config):
    # `make test`: one xdist session, the service tests one unit (service_scheduling.py).
    service_scheduling.register(config)


# Under xdist the service tests run in one worker, one after another: the longest
# chain of the session (the CPU image build leads it). The other workers' tests
# yield the cores to it (nice 10: about a tenth of a core's share against it) and
# take whatever it leaves idle, which is most of the time.
SERVICE_FIRST_NICE = 10


@pytest.fixture(autouse=True)
def _one_core_per_xdist_worker(request):
    """Under pytest-xdist, pin each worker's non-service tests to a core of their own.
    Every workload a test starts inherits the affinity, so it sizes its threads to
    one core (hpcai.provenance.usable_cpus) instead of two workers' torch thread pools
    fighting over every core, which slows CPU runs 10-50x. Service tests keep every
    core: the daemons they start size themselves from what they see, and the
    affinity is restored after each test so a daemon started later sees them all.
    The pinned tests also run at a lower priority (SERVICE_FIRST_NICE)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if (not worker.startswith("gw") or request.node.get_closest_marker("system")
            or not hasattr(os, "sched_setaffinity")):
        yield
        return
    cores = sorted(os.sched_getaffinity(0))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if len(cores) < 2 or workers < 2:
        yield
        return
    os.sched_setaffinity(0, {service_scheduling.core_for_worker(request.config, worker, cores)})
    priority = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, priority + SERVICE_FIRST_NICE)
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)
        try:  # raising priority back needs root: without it there are no service tests
            os.setpriority(os.PRIO_PROCESS, 0, priority)
        except PermissionError:
            pass


class FakeNode:
    """A simulated GPU node: the fake pynvml/amdsmi state file plus the
    environment a subprocess needs to see it instead of the real libraries."""

    def __init__(self, tmp: Path, devices: list[dict] | None):
        self.state = tmp / "fake-gpus.json"
        self.state_dir = tmp / "state"
        self.results = tmp / "results"
        self.mark = new_mark()  # every process started here, and its descendants
        if devices is not None:
            fake_gpu_state.write_state(self.state, devices)
        self.env = dict(os.environ)
        self.env.update({
            "HPCAI_STATE_DIR": str(self.state_dir),
            "PYTHONUNBUFFERED": "1",
        })
        if devices is not None:
            self.env["PYTHONPATH"] = os.pathsep.join(
                [str(FAKES), self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            self.env["HPCAI_FAKE_GPU_STATE"] = str(self.state)
        else:
            # No GPU: make sure a real driver on a developer's machine is not seen either.
            self.env["PYTHONPATH"] = os.pathsep.join(
                [str(FAKES / "no_gpu"), self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    def devices(self) -> list[dict]:
        return fake_gpu_state.read_state(self.state)["devices"]

    def limits(self) -> list[float]:
        return [d["current_limit_w"] for d in self.devices()]

    def update(self, index: int, **changes) -> None:
        fake_gpu_state.update_device(self.state, index, **changes)

    def journal_files(self) -> list[Path]:
        return sorted(self.state_dir.glob("*.json")) if self.state_dir.exists() else []

    def launch(self, *args, timeout=600, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([*LAUNCHER, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT,
                              **popen_options(kwargs.pop("env", self.env), self.mark), **kwargs)

    def popen(self, *args) -> subprocess.Popen:
        """The launcher in the background, with SIGHUP at its default even under nohup."""
        return subprocess.Popen([*LAUNCHER, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                **popen_options(self.env, self.mark))

    def stop_everything(self) -> list[int]:
        """Teardown: every process this node started, and all they started, killed,
        then the node-wide authority's files for this node's GPUs removed (their UUIDs
        are this test's own, so nothing else holds them; /run would keep them)."""
        killed = kill_marked(self.mark)
        if self.state.is_file():
            for device in self.devices():
                for leftover in Path("/run/hpcai").glob(f"gpu-{device['uuid']}.*"):
                    leftover.unlink(missing_ok=True)
        return killed

    def result_paths(self) -> list[Path]:
        return sorted(self.results.glob("*/result.json"))

    def only_result(self) -> dict:
        paths = self.result_paths()
        assert len(paths) == 1, paths
        return json.loads(paths[0].read_text())


@pytest.fixture
def fake_nvidia_node(tmp_path) -> FakeNode:
    """Two FAKE H100s (min 200 W, max 700 W, default and current 700 W)."""
    node = FakeNode(tmp_path, fake_gpu_state.make_devices(2, "nvidia"))
    yield node
    node.stop_everything()


@pytest.fixture
def cpu_node(tmp_path) -> FakeNode:
    """A node without GPUs (the fake libraries report none)."""
    node = FakeNode(tmp_path, None)
    yield node
    node.stop_everything()


@pytest.fixture(scope="session")
def result_schema() -> dict:
    return json.loads((ROOT / "hpcai/schema/result-v1.schema.json").read_text())


def one_line_error(done, *fragments):
    """A failed command that said what is wrong, and what to do, in one line."""
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("hpcai-launch: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def pid_alive(pid: int) -> bool:
    """Running (a zombie no one reaped yet does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def assert_valid_result(doc: dict, schema: dict) -> None:
    import jsonschema

    errors = [f"{e.json_path}: {e.message}"
              for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
    assert not errors, errors


# Real Apptainer, a tiny SIF, a real OCI registry, signing keys (tests/image_fixtures.py).
from image_fixtures import (apptainer_exe, cpu_cv_image, registry, signing_keys,  # noqa: E402,F401
                            tiny_image)

# A real two-node Slurm cluster, private to the session (tests/slurm_fixtures.py).
from slurm_fixtures import slurm_cluster  # noqa: E402,F401


@pytest.fixture(autouse=True)
def results_index(tmp_path_factory, monkeypatch) -> Path:
    """Each test's results index (report/store.py) in its own temporary folder,
    not the user's cache: the index is a cache, and tests must not share one."""
    path = tmp_path_factory.mktemp("results-index") / "index.duckdb"
    monkeypatch.setenv("HPCAI_RESULTS_INDEX", str(path))
    return path
