"""A classic HPC mini-app beside an AI workload under the same cap (issue 30 §3):
HPC Challenge (Debian's `hpcc`, the exec workload's `hpcc` preset), timed to
solution, and ResNet-50's tiny preset, both at 300 W on the FAKE GPUs
(tests/fakes: NVML's boundary, GPUs reported busy so the validity checks pass);
one report shows both. hpcc is a system package (`apt-get install hpcc`): the
test fails, never skips, where it is missing.
"""
import json
import shutil

import pytest

from conftest import FakeNode, assert_valid_result
from fakes import fake_gpu_state

pytestmark = pytest.mark.slow


@pytest.fixture
def busy_node(tmp_path):
    node = FakeNode(tmp_path, fake_gpu_state.make_devices(2, "nvidia", utilization_pct=95.0))
    yield node
    node.stop_everything()


@pytest.mark.timeout(3600)  # two runs and a report on a loaded 2-core machine
def test_hpcc_and_resnet50_under_one_cap_in_one_report(busy_node, tmp_path, result_schema):
    node = busy_node
    assert shutil.which("hpcc"), "hpcc is not installed: apt-get install hpcc"
    hpcc = node.launch("exec", "--preset", "hpcc", "--cap", "300", "-o", str(node.results),
                       timeout=1800)
    assert hpcc.returncode == 0, hpcc.stderr[-3000:]
    ai = node.launch("resnet50", "--preset", "tiny", "--nproc", "1", "--device", "cpu", "--cap", "300",
                     "--ci-target", "off",
                     # A window over validity's 1 s floor on a fast idle machine too.
                     "--steps-per-epoch", "8",
                     "-o", str(node.results), timeout=1800)
    assert ai.returncode == 0, ai.stderr[-3000:]
    results = {r["workload"]: r for r in (json.loads(p.read_text()) for p in node.result_paths())}
    assert sorted(results) == ["exec", "resnet50"]
    mini = results["exec"]
    assert_valid_result(mini, result_schema)
    assert mini["status"] == "complete" and mini["spec"]["preset"] == "hpcc"
    metrics = mini["workload_metrics"]["exec"]
    assert metrics["exit_code"] == 0 and metrics["time_to_solution_s"] > 0
    assert metrics["energy_to_solution_j"] == mini["power"]["energy_per_unit_j"] > 0
    # hpcc ran every test and said so (its summary, copied into the run's log).
    log = (node.results / mini["run_id"] / "workload.log").read_text()
    assert "hpcc Success=1" in log and "hpcc HPL_Tflops=" in log
    for result in results.values():
        assert result["power"]["cap"]["requested_w"] == 300
    assert node.limits() == [700.0, 700.0]

    report = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert not rep["excluded_runs"], rep["excluded_runs"]
    assert {"throughput-solutions", "throughput-images"} <= set(rep["tables"])
    by_workload = {c["workload"]: c for c in rep["cells"]}
    assert sorted(by_workload) == ["exec", "resnet50"]
    assert {c["cap_w"] for c in rep["cells"]} == {300.0}
