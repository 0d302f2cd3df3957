"""The serving steady state from a recorded client output with known timestamps
(tests/data/sglang-bench-requests.json, in the format workloads/sglang_client.py
writes: SGLang's RequestFuncOutput start_time/latency/ttft/itl per request)."""
import json
import shutil
from pathlib import Path

import pytest

from hpcai.workloads import distributed
from hpcai.workloads import llm_serve as S
from hpcai.measure import steady_state as SS
from hpcai.workloads.catalog import LLAMA3_8B_INFERENCE

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang-bench-requests.json"


def recorded():
    doc = json.loads(DATA.read_text())
    return [{**r, "start": r["start"] + doc["wall_minus_perf_s"]} for r in doc["requests"]], doc


def test_the_window_runs_from_full_concurrency_to_the_first_ramp_down_completion():
    requests, doc = recorded()
    base = doc["wall_minus_perf_s"]
    found = SS.analyse(requests, 2)
    # Sent at 10.0 and 10.5: two in flight from 10.5. The last request is sent at 14.125
    # (after the second completes at 14.0); the first to complete after that is the
    # fourth, at 14.75: the ramp-down's first completion ends the steady state.
    assert found["available"] and found["peak_in_flight"] == 2
    assert found["start"] == base + 10.5 and found["end"] == base + 14.75
    assert found["duration_s"] == 4.25
    phases = found["phases"]
    assert phases["ramp_up"] == {"start": base + 10.0, "end": base + 10.5}
    assert phases["steady"] == {"start": base + 10.5, "end": base + 14.75}
    assert phases["ramp_down"] == {"start": base + 14.75, "end": base + 15.125}
    # Output tokens stamped inside [10.5, 14.75]: all 4 of the first four requests
    # (10.5 and 14.75 included), 2 of the fifth's (14.375, 14.625).
    assert found["output_tokens"] == 18.0
    assert found["output_tokens_per_s"] == pytest.approx(18.0 / 4.25)
    assert found["completed_in_window"] == 4


def test_a_load_that_never_fills_the_target_has_no_steady_state():
    requests, _ = recorded()
    found = SS.analyse(requests, 3)
    assert not found["available"] and "never reached the target concurrency 3" in found["reason"]
    assert "at most 2" in found["reason"]


def test_failed_requests_do_not_count_in_flight():
    requests, doc = recorded()
    requests[0]["success"] = False  # the first: now two are in flight only from 12.125
    found = SS.analyse(requests, 2)
    assert found["start"] == doc["wall_minus_perf_s"] + 12.125 and found["completed"] == 4


def test_the_serving_workload_reads_the_recorded_file_into_its_measured_epoch(tmp_path):
    preset = LLAMA3_8B_INFERENCE.presets["tiny"]
    spec = {"params": {**preset.params, "batch_size": 2}, "protocol": dict(preset.protocol),
            "devices": {"type": "cpu", "gpu_indices": None}, "output_dir": str(tmp_path), "seed": 1}
    workload = S.build(spec, distributed.Context(0, 1, 0, 1, "cpu", None, None, 1, "host"))
    shutil.copy(DATA, tmp_path / S.CLIENT_REQUESTS)
    found = workload._steady_state(num_prompts=5)
    base = json.loads(DATA.read_text())["wall_minus_perf_s"]
    assert found["available"] and found["target_concurrency"] == 2
    assert (found["start"], found["end"]) == (base + 10.5, base + 14.75)
    assert workload.phases() is None  # only once the measured epoch has run
    workload.steady = found
    assert set(workload.phases()) == {"ramp_up", "steady", "ramp_down"}
    (tmp_path / S.CLIENT_REQUESTS).unlink()
    missing = workload._steady_state(num_prompts=5)
    assert not missing["available"] and "no per-request timestamps" in missing["reason"]


def test_one_burst_of_every_request_keeps_the_whole_load_as_its_measurement(tmp_path):
    # The paper preset sends every request at once (no --max-concurrency): its
    # "steady state" would end at the first completion, so the whole load stays
    # the headline (the paper's basis) and the window is only recorded.
    preset = LLAMA3_8B_INFERENCE.presets["paper"]
    assert preset.params["batch_size"] == "unlimited"
    spec = {"params": {**LLAMA3_8B_INFERENCE.presets["tiny"].params, "batch_size": "unlimited"},
            "protocol": dict(preset.protocol), "devices": {"type": "cpu", "gpu_indices": None},
            "output_dir": str(tmp_path), "seed": 1}
    workload = S.build(spec, distributed.Context(0, 1, 0, 1, "cpu", None, None, 1, "host"))
    shutil.copy(DATA, tmp_path / S.CLIENT_REQUESTS)
    burst = workload._steady_state(num_prompts=2)
    assert burst["available"] and not burst["measured"]
    assert "every request sent at once" in burst["basis"]
    bounded = S.build({**spec, "params": {**spec["params"], "batch_size": 2}},
                      distributed.Context(0, 1, 0, 1, "cpu", None, None, 1, "host"))
    assert bounded._steady_state(num_prompts=5)["measured"]
