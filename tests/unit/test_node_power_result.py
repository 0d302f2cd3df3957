"""node_power in the result: the GPUs' energy beside a measured node, the
node's measured overhead, and efficiency "with node" from the measured node
energy (else the fixed overhead), each figure naming its boundary and API.
The GPU is the fake NVML (tests/fakes/pynvml.py), named as such."""
import jsonschema
import pytest
from fakes import fake_gpu_state as fgs
from test_node_power import pm_set, pm_tree

from hpcai.gpu.base import GpuReading
from hpcai.measure import node_power as NP
from hpcai.measure import power_sources
from hpcai.workloads import result as R
from hpcai.measure.telemetry import Sampler

SPEC = {"power": {"node_overhead_w": 100.0}, "devices": {"gpu_indices": [0]},
        "protocol": {"telemetry": True}}


def gpu_sampler(t0, seconds, watts=300.0):
    s = Sampler(sources=[object()], interval_s=0.1)
    s.times = [t0 + i * 0.1 for i in range(int(seconds * 10) + 1)]
    s.readings = [[GpuReading(power_w=watts, energy_j=watts * (t - t0))] for t in s.times]
    return s


def node_sampler(tmp_path, t_mono0, seconds, watts=500.0, wall0=0.0):
    root = pm_tree(tmp_path / "pm", accels=1)
    node = NP.NodePowerSampler({"sources": ["pm_counters"], "pm_counters": {"root": str(root)}})
    node._wall0, node._mono0 = wall0, t_mono0
    run = node.runs[0]
    for i in range(seconds + 1):  # a BMC-like counter at `watts`, read every second
        (root / "freshness").write_text(f"{1000 + i}\n")
        pm_set(root, "energy", f"{100000 + watts * i} J")
        run.tick()
        run.samples[-1].t = t_mono0 + i
    return node


def power(tmp_path, monkeypatch, node):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    found = power_sources.discover("auto")
    try:
        return R.power_section(SPEC, found, gpu_sampler(0.0, 12), (1.0, 11.0), 1000, node=node)[2]
    finally:
        found.close()


def test_measured_node_energy_drives_efficiency_with_node(tmp_path, monkeypatch, result_schema):
    out = power(tmp_path, monkeypatch, node_sampler(tmp_path, 50.0, 12, wall0=0.0))
    node = out["node_power"]
    assert out["energy_j"] == pytest.approx(3000.0)  # GPU: 300 W x 10 s
    assert node["node_energy_j"] == pytest.approx(5000.0)  # node: 500 W x 10 s
    assert node["measured_overhead_w"] == pytest.approx(200.0)
    assert out["energy_with_overhead_j"] == pytest.approx(5000.0)
    assert out["energy_with_overhead_basis"] == "measured (pm_counters/node)"
    assert out["units_per_joule_with_overhead"] == pytest.approx(1000 / 5000.0)
    assert out["boundaries"]["energy_with_overhead_j"] == {"boundary": "node",
                                                           "api": "HPE Cray pm_counters sysfs"}
    assert out["boundaries"]["energy_j"]["boundary"] == "GPU board"
    jsonschema.validate(out, {**result_schema["properties"]["power"], "$defs": result_schema["$defs"]})


def test_without_a_node_source_the_fixed_overhead_is_used_and_said(tmp_path, monkeypatch,
                                                                   result_schema):
    out = power(tmp_path, monkeypatch, None)
    assert out["energy_with_overhead_j"] == pytest.approx(3000.0 + 100.0 * 10)
    assert out["energy_with_overhead_basis"] == "fixed overhead (100 W per node)"
    assert out["node_power"] is None
    jsonschema.validate(out, {**result_schema["properties"]["power"], "$defs": result_schema["$defs"]})


def test_a_node_source_that_missed_the_window_falls_back_with_reasons(tmp_path, monkeypatch):
    node = node_sampler(tmp_path, 50.0, 3, wall0=0.0)  # covers only 0..3 s of a 1..11 s window
    node.runs[0].fault("no answer (TimeoutError: read timed out)")
    out = power(tmp_path, monkeypatch, node)
    assert out["energy_with_overhead_basis"] == "fixed overhead (100 W per node)"
    assert out["node_power"]["node_energy_j"] is None
    assert "pm_counters: no answer (TimeoutError: read timed out) (1x)" in out["node_power"]["reasons"]


def test_the_idle_baseline_of_a_sweep_reads_the_node_sources(tmp_path, monkeypatch):
    from hpcai.launcher.sweep.idle import measure_idle

    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    root = pm_tree(tmp_path / "pm", accels=0)
    baseline = measure_idle("auto", None, 0.35, 0.1, {
        "sources": ["pm_counters"], "pm_counters": {"root": str(root), "interval_s": 0.1}})
    assert baseline["available"] is True
    node = {e["channel"]: e for e in baseline["node_power"]["sources"]}
    assert set(node) == {"node", "cpu", "memory"} and node["node"]["scope"] == "node"
    assert node["node"]["samples"] >= 2


def test_the_entrypoint_starts_the_sites_node_sources_and_writes_node_power(tmp_path, monkeypatch,
                                                                            result_schema):
    """Run._setup/_document as a run does them; only the workload module is replaced
    (build is not what this tests), the GPU is the fake NVML."""
    import json
    import types

    from hpcai.launcher.run.results import validation_errors
    from hpcai.launcher.run.runtime import HOST
    from hpcai.launcher.run.spec import build_spec
    from hpcai import result_document
    from hpcai.workloads import entrypoint
    from hpcai.workloads.catalog import get_workload
    from hpcai.workloads.protocol import Epoch

    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    spec = build_spec(get_workload("resnet50"), "tiny", impl="pytorch", overrides={},
                      protocol_overrides={"warmup_epochs": 0, "epochs": 1}, device_type="cpu",
                      vendor=None, nproc=1, gpu_indices=None, cap_w=None, power_method="auto",
                      cap_tolerance_frac=0.05, node_overhead_w=100.0, site={"name": "default"},
                      output_dir=str(tmp_path), runtime=dict(HOST)).to_json()
    spec["node_power"] = {"sources": ["pm_counters"],
                          "pm_counters": {"root": str(pm_tree(tmp_path / "pm", accels=0))}}
    real_import = entrypoint.importlib.import_module
    workload_module = types.SimpleNamespace(build=lambda spec, ctx: None)
    monkeypatch.setattr(entrypoint.importlib, "import_module",
                        lambda name, *a: workload_module if name == "hpcai.workloads.resnet50"
                        else real_import(name, *a))
    run = entrypoint.Run(spec, tmp_path / "out")
    run._setup()
    try:
        assert [r.source.kind for r in run.node_power.runs] == ["pm_counters"]
        run.node_power.start()
        t0 = run.sampler.now()
        run.progress.epochs.append(Epoch(0, False, 10, 80, t0, t0 + 0.2, 0.2, 1.0))
        run.progress.first_loss = 2.5
        run.status = "complete"
        doc = json.loads(json.dumps(result_document.clean(run._document())))  # as Run._write writes it
    finally:
        run.node_power.stop()
        run.discovery.close()
    assert validation_errors(doc) == []
    assert doc["power"]["node_power"]["status"][0]["source"] == "pm_counters"
    assert {e["channel"] for e in doc["power"]["node_power"]["sources"]} == {"node", "cpu", "memory"}


def test_a_multi_node_aggregate_sums_measured_node_energy(tmp_path):
    """Where every node measured its own energy, the aggregate's efficiency with
    node uses their sum and says so; else the fixed overhead, as before."""
    from test_slurm_aggregate import result, two_node_job, write

    from hpcai.launcher.slurm import aggregate
    from hpcai.launcher.slurm.job import node_dir

    job = two_node_job(tmp_path)
    run_id = job.runs[0].run_id
    for rank, node_j in ((0, 2000.0), (1, 1800.0)):
        doc = result(80.0)
        doc["power"].update(energy_with_overhead_j=node_j,
                            energy_with_overhead_basis="measured (ipmi/node)")
        write(node_dir(job.folder, run_id, rank) / "result.json", doc)
    power = aggregate.aggregate(job, 0)["power"]
    assert power["units_per_joule_with_overhead"] == pytest.approx(1600 / 3800)
    assert power["energy_with_overhead_basis"] == "measured at each node"
    write(node_dir(job.folder, run_id, 1) / "result.json", result(80.0))  # one node did not
    power = aggregate.aggregate(job, 0)["power"]
    assert power["units_per_joule_with_overhead"] == pytest.approx(1600 / (1200 + 2 * 100 * 10))
    assert power["energy_with_overhead_basis"].startswith("fixed overhead")
