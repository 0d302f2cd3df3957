"""Which workloads measure in-run, and how: SGLang serving in load waves (one
benchmark client run per segment), which --ci-target cannot stop early."""
from __future__ import annotations

from hpcai.launcher.sweep.inrun_support import adaptive_supported, supported
from hpcai.launcher.run.plan import _window_protocol
from hpcai.spec import RunSpec
from hpcai.workloads import distributed
from hpcai.workloads.inrun import Measurer
from hpcai.workloads.protocol import Epoch, Progress


def cannot_measure_in_run(monkeypatch, name):
    """The catalog's `name`, its implementations declared without in-run (Impl.in_run None)."""
    import dataclasses

    from hpcai.workloads import catalog

    workload = catalog.WORKLOADS[name]
    impls = {k: dataclasses.replace(i, in_run=None) for k, i in workload.impls.items()}
    monkeypatch.setitem(catalog.WORKLOADS, name, dataclasses.replace(workload, impls=impls))


def test_serving_measures_in_run_but_not_adaptively(monkeypatch):
    assert supported("llama3-8b-inference", None) is None
    assert "one load wave" in adaptive_supported("llama3-8b-inference", None)
    for name in ("resnet50", "vit-l16", "sd2", "cosmoflow", "llama3-8b-pretrain"):
        assert supported(name, None) is None and adaptive_supported(name, None) is None
    assert supported("resnet50", "tensorflow") is None
    # A workload whose declaration says it cannot measure in-run (every built-in
    # one can today: one declared without it) cannot measure adaptively either.
    cannot_measure_in_run(monkeypatch, "cosmoflow")
    assert "cannot measure in-run" in supported("cosmoflow", None)
    assert adaptive_supported("cosmoflow", None) == supported("cosmoflow", None)


def test_a_serving_spec_keeps_no_ci_target_a_training_spec_does():
    protocol = {"warmup_epochs": 1, "epochs": 1, "steps_per_epoch": 8, "sample_interval_s": 0.1,
                "ci_target": 0.02}

    def spec(workload: str) -> RunSpec:
        return RunSpec.from_json({"run_id": "r", "workload": workload, "impl": None,
                                  "preset": "tiny", "params": {}, "protocol": protocol,
                                  "devices": {"type": "cpu"},
                                  "power": {"cap_w": None, "method": "auto",
                                            "node_overhead_w": 0.0}}, need_output=False)

    serve = _window_protocol(spec("llama3-8b-inference"))
    train = _window_protocol(spec("resnet50"))
    assert serve.get("ci_target") is None and train["ci_target"] == 0.02


class Engine:
    runs_programs = False
    in_run_waves = True


def test_one_wave_asks_for_the_protocols_requests_once_and_says_why_it_stopped():
    protocol = {"warmup_epochs": 2, "epochs": 1, "steps_per_epoch": 24,
                "sample_interval_s": 0.1, "block_s": 0.2}
    measurer = Measurer(Engine(), protocol, distributed.single("cpu"), None, Progress())
    program = measurer.one_wave()
    assert next(program) == (24, False)  # one measured epoch: the client's 24 requests
    wave = Epoch(0, False, 20, 640, 1000.0, 1002.0, 2.0, None)
    try:
        program.send(wave)
        raise AssertionError("one wave asked for a second epoch")
    except StopIteration as stop:
        record = stop.value
    assert record["mode"] == "load wave" and record["stopped"] == "one load wave"
    assert record["requests"] == 24 and record["blocks"] == 1 and record["ci_target"] is None
    assert record["gap_after_settle_s"] == 0.0  # the wave "started" before it was asked for
    # Warm-up: the engine's own wave size when given, else the protocol's steps.
    assert list(Measurer(Engine(), protocol, distributed.single("cpu"), None,
                         Progress()).warm_up(4)) == [(4, True), (4, True)]
