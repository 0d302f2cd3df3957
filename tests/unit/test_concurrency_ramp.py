"""SGLang `fast`'s concurrency ramp (workloads/concurrency_ramp.py): the rule that
keeps the smallest concurrency within 3% of the best, when it is skipped, and
bad ramps refused as one-line usage errors. The ramp against a server is in
tests/integration/test_llm_serve.py (the stand-in)."""
import pytest

from hpcai.errors import UsageError
from hpcai.workloads import concurrency_ramp as ramp
from hpcai.workloads import llm_serve as S
from hpcai.workloads.catalog import LLAMA3_8B_INFERENCE


def probes(*figures):
    return [{"concurrency": c, "output_tokens_per_s": t} for c, t in figures]


def test_the_smallest_concurrency_within_3_percent_of_the_best_is_kept():
    # Saturated at 128: 256 is 2% faster, not worth twice the requests in flight.
    assert ramp.choose(probes((64, 5600.0), (128, 9800.0), (256, 10000.0))) == 128
    # 128 is 4% short of the best: 256 is kept.
    assert ramp.choose(probes((64, 5600.0), (128, 9600.0), (256, 10000.0))) == 256
    # Past saturation the throughput falls: the best is the peak.
    assert ramp.choose(probes((64, 9000.0), (128, 12000.0), (256, 11000.0))) == 128
    assert ramp.choose(probes((64, 9990.0), (128, 10000.0), (256, 10010.0))) == 64


def test_a_probe_without_output_is_not_chosen_and_none_at_all_is_an_error():
    assert ramp.choose(probes((64, None), (128, 100.0))) == 128
    with pytest.raises(ValueError):
        ramp.choose(probes((64, None), (128, 0.0)))


def test_the_record_holds_every_probe_and_the_rule():
    found = probes((64, 5600.0), (128, 9800.0), (256, 10000.0))
    doc = ramp.record(found, ramp.choose(found))
    assert doc["probed"] == [64, 128, 256] and doc["chosen"] == 128 and doc["best"] == 256
    assert doc["probes"] == found and doc["tolerance"] == 0.03 and "3%" in doc["rule"]


@pytest.mark.parametrize("text,expected", [("64,128,256", (64, 128, 256)), ("256, 64", (64, 256)),
                                           ("off", ()), (None, ()), ("", ())])
def test_ramps_parse_sorted(text, expected):
    assert ramp.parse(text) == expected


@pytest.mark.parametrize("text,message", [("64,x", "not a list of whole numbers"),
                                          ("0,64", "below 1"), ("64,64", "repeats")])
def test_bad_ramps_are_usage_errors(text, message):
    with pytest.raises(UsageError, match=message):
        ramp.parse(text)


def test_the_ramp_is_skipped_when_the_user_fixes_the_load():
    assert ramp.skipped_because((64,), (), float("inf")) is None
    assert "--batch-size given" in ramp.skipped_because((64,), ("batch_size",), float("inf"))
    assert "--request-rate given" in ramp.skipped_because((64,), (), 4.0)
    assert ramp.skipped_because((), (), float("inf")) == "no --concurrency-ramp"


def serve_spec(tmp_path, overridden=(), **params):
    preset = LLAMA3_8B_INFERENCE.presets["fast"]
    return {"params": {**preset.params, **params}, "protocol": dict(preset.protocol),
            "devices": {"type": "cuda", "gpu_indices": [0]}, "output_dir": str(tmp_path / "run"),
            "seed": 0, "overridden": list(overridden)}


def test_fast_ramps_unless_batch_size_is_given(tmp_path):
    from hpcai.workloads import distributed

    ctx = distributed.Context(0, 1, 0, 1, "cuda", None, None, 1, "host")
    fast = S.SglangServe(serve_spec(tmp_path), ctx)
    assert fast.ramp == (64, 128, 256) and fast.ramp_skipped is None
    given = S.SglangServe(serve_spec(tmp_path, ("batch_size",), batch_size=96), ctx)
    assert given.concurrency == 96 and "--batch-size given" in given.ramp_skipped
    assert given.describe()["concurrency_ramp"] == {"skipped": given.ramp_skipped}
    command = fast.client_command(128, 128, tmp_path / "probe")
    assert command[command.index("--max-concurrency") + 1] == "128"
    assert command[command.index("--output-file") + 1] == str(tmp_path / "probe" / S.CLIENT_RESULT)
