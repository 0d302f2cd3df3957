"""`make test`'s scheduling (tests/service_scheduling.py), run by the real
pytest-xdist over a small generated suite: the service tests share one worker and
run in collection order while the other files spread over the other workers."""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
import service_scheduling

def pytest_collection_modifyitems(config, items):
    for item in items:  # conftest.py marks by fixture; here by name
        if "service" in item.name:
            item.add_marker(pytest.mark.system)
    service_scheduling.report_service_ids(config, items)

def pytest_configure(config):
    service_scheduling.register(config)

@pytest.fixture(autouse=True)
def _core(request):  # the core each worker's plain tests would be pinned to
    import os
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    if not request.node.get_closest_marker("system"):
        core = service_scheduling.core_for_worker(request.config, worker, [0, 1])
        with open(os.environ["CORES_FILE"], "a") as out:
            out.write(f"{{worker}} {{core}}\\n")
    yield
"""

# Each file: a service test between plain ones, each sleeping a little so that every
# worker gets work before the queue empties.
MODULE = """
import time

def test_plain_{n}_a():
    time.sleep(0.3)

def test_service_{n}():
    time.sleep(0.5)  # the service unit outlasts the other workers' first tests

def test_plain_{n}_b():
    time.sleep(0.3)
"""


def test_service_tests_run_in_one_worker_in_order_beside_the_file_units(tmp_path):
    cores = tmp_path / "cores.txt"
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    system: a service test\n")
    folder = tmp_path / "tests" / "integration"
    folder.mkdir(parents=True)
    for n in range(4):
        (folder / f"test_m{n}.py").write_text(textwrap.dedent(MODULE.format(n=n)))
    for n in range(4, 8):
        (tmp_path / "tests" / f"test_m{n}.py").write_text(textwrap.dedent(MODULE.format(n=n)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
                           "-n", "3", "--dist", "loadfile", "tests"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CORES_FILE": str(cores)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d)\] \[\s*\d+%\] PASSED (\S+)", done.stdout, re.M)
    assert len(ran) == 24, done.stdout[-3000:]
    services = [(worker, test) for worker, test in ran if "test_service_" in test]
    assert len({worker for worker, _ in services}) == 1, services
    assert [test.rsplit("_", 1)[1] for _, test in services] == [str(n) for n in range(8)]
    # The plain tests still go a file at a time, and onto more than one worker.
    by_file: dict[str, set] = {}
    for worker, test in ran:
        if "test_plain_" in test:
            by_file.setdefault(test.split("::")[0], set()).add(worker)
    assert all(len(workers) == 1 for workers in by_file.values()), by_file
    assert len(set().union(*by_file.values())) >= 2, by_file
    # The two workers without the service unit each hold a core of their own.
    plain_workers = {worker for worker, _ in ran} - {worker for worker, _ in services}
    claimed = {}
    for line in cores.read_text().splitlines():
        worker, core = line.split()
        claimed.setdefault(worker, set()).add(core)
    assert len(plain_workers) == 2 and all(len(claimed[w]) == 1 for w in plain_workers), claimed
    assert claimed[min(plain_workers)] != claimed[max(plain_workers)], claimed


def test_units_go_out_services_first_then_integration_then_the_rest_longest_first(tmp_path):
    """One worker runs its units in the order they are sent: the service unit,
    then integration files before the others, each kind by its longest declared
    time-out."""
    (tmp_path / "conftest.py").write_text(CONFTEST.split("@pytest.fixture")[0])
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    system: a service test\n")
    files = {"tests/integration/test_a.py": "def test_plain_a():\n    pass\n\n"
                                            "def test_service_a():\n    pass\n",
             "tests/integration/test_b.py": "",
             "tests/integration/test_c.py": "import pytest\n\n@pytest.mark.timeout(900)\n",
             "tests/test_d.py": "",
             "tests/test_e.py": "import pytest\n\n@pytest.mark.timeout(5000)\n"}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        stem = path.stem.split("_")[1]
        if not text.startswith("def"):
            text += f"def test_plain_{stem}():\n    pass\n\ndef test_plain_{stem}_2():\n    pass\n"
        path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
                           "-n", "1", "--dist", "loadfile", "tests"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = re.findall(r"^\[gw0\] \[\s*\d+%\] PASSED (\S+)", done.stdout, re.M)
    runs = [file for file, _ in itertools.groupby(t.split("::")[0] for t in ran)]
    assert ran[0] == "tests/integration/test_a.py::test_service_a", ran
    # Equal ranks keep xdist's order: more tests first (test_b's two before test_a's one).
    assert runs == ["tests/integration/test_a.py", "tests/integration/test_c.py",
                    "tests/integration/test_b.py", "tests/integration/test_a.py",
                    "tests/test_e.py", "tests/test_d.py"], ran
