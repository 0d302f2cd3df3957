"""`--batch-size auto` on a GPU: the fastest batch, not the largest, and the
cache of chosen batches per GPU model (hpcai/batch_cache.py). The GPU is a
stand-in here: FakeGpu's step fails over its memory limit and advances a fake
clock by the time its throughput model says, so no test depends on this
machine's speed."""
import json
import os
from pathlib import Path

import pytest

from hpcai import batch_cache
from hpcai.errors import WorkloadError
from hpcai.workloads import batch_search as bs


class FakeGpu:
    """run_step(n): False over `limit` (out of memory); else the step takes
    n / rate(n) seconds on the fake clock."""

    def __init__(self, limit, rate):
        self.limit, self.rate, self.now, self.steps = limit, rate, 0.0, []

    def clock(self):
        return self.now

    def run_step(self, n):
        self.steps.append(n)
        if n > self.limit:
            return False
        self.now += n / self.rate(n)
        return True


def saturating(n):  # images/s that flatten out as the batch grows
    return 1000.0 * n / (n + 2)


def linear(n):
    return 10.0 * n


def search(gpu, cache=None, start=64, gather=bs._alone, fastest=True):
    return bs.find(gpu.run_step, on_gpu=True, start=start, gather=gather, fastest=fastest,
                   cache=cache, clock=gpu.clock)


def test_candidates_are_the_largest_half_and_quarter_in_multiples_of_8():
    assert bs.candidates(296) == [296, 144, 72]
    assert bs.candidates(16) == [16, 8]
    assert bs.candidates(5) == [5]


def test_the_smallest_within_2_percent_of_the_best_is_kept():
    timings = [{"batch_size": 64, "fits": True, "units_per_s": 1000.0},
               {"batch_size": 32, "fits": True, "units_per_s": 985.0},
               {"batch_size": 16, "fits": True, "units_per_s": 970.0}]
    assert bs.pick_fastest(timings) == 32
    timings[1]["units_per_s"] = 900.0
    assert bs.pick_fastest(timings) == 64


def test_a_candidate_that_fails_its_timed_steps_is_not_picked():
    timings = [{"batch_size": 64, "fits": False}, {"batch_size": 32, "fits": True, "units_per_s": 5.0}]
    assert bs.pick_fastest(timings) == 32
    with pytest.raises(WorkloadError, match="no candidate"):
        bs.pick_fastest([{"batch_size": 64, "fits": False}])


def test_gpu_search_keeps_a_smaller_batch_when_the_largest_is_no_faster():
    gpu = FakeGpu(300, saturating)
    record = search(gpu)
    assert record["largest"] == 296 and record["method"] == "trial+throughput"
    # 296: 993 img/s, 144: 986 (within 2%), 72: 973 (not)
    assert record["found"] == 144
    assert [t["batch_size"] for t in record["timings"]] == [296, 144, 72]
    assert record["timings"][0]["units_per_s"] == pytest.approx(saturating(296))
    assert record["timed"] == "eager" and bs.THROUGHPUT_RULE in record["rule"]
    assert all(p["fits"] == (p["batch_size"] <= 300) for p in record["probes"])


def test_gpu_search_keeps_the_largest_when_it_is_faster():
    record = search(FakeGpu(300, linear))
    assert record["found"] == record["largest"] == 296


def test_the_paper_rule_still_takes_the_largest():
    record = search(FakeGpu(300, saturating), fastest=False)
    assert record["found"] == 296 and record["method"] == "trial" and "timings" not in record


def test_processes_time_by_the_slowest():
    """Another process is twice as slow at the largest batch: it decides."""
    gpu = FakeGpu(300, linear)

    def gather(value):
        slow = isinstance(value, float) and gpu.steps[-1] == 296
        return [value, value * 4 if slow else value]

    record = search(gpu, gather=gather)
    assert record["timings"][0]["seconds"] == pytest.approx(4 * bs.TIMED_STEPS * 296 / linear(296))
    assert record["found"] == 144


# ---- the cache ------------------------------------------------------------------------


def cache_for(folder, **settings):
    params = {"image_size": 224, "precision": "bf16-mixed", "compile": True, "lr": 0.1, **settings}
    description = batch_cache.describe_key("NVIDIA H100 80GB HBM3", 85 * 2**30, "resnet50",
                                           "torch 2.x", params)
    return batch_cache.BatchCache(description, folder=folder)


def test_the_key_counts_memory_settings_not_the_learning_rate(tmp_path):
    base = cache_for(tmp_path).key
    assert cache_for(tmp_path, lr=0.5).key == base
    assert cache_for(tmp_path, batch_search_start=8).key == base
    assert cache_for(tmp_path, image_size=160).key != base
    assert cache_for(tmp_path, compile=False).key != base
    other_gpu = dict(cache_for(tmp_path).description, memory_bytes=40 * 2**30)
    assert batch_cache.key_of(other_gpu) != base


def test_a_second_run_starts_from_the_cache_with_one_probe(tmp_path):
    first = search(FakeGpu(300, saturating), cache=cache_for(tmp_path))
    assert first["cache"] == {"key": cache_for(tmp_path).key, "used": False,
                              "note": "no entry for this key", "stored": True}
    entry = json.loads((tmp_path / "batch-cache" / f"{first['cache']['key']}.json").read_text())
    assert entry["batch_size"] == 144 and entry["method"] == "trial+throughput"
    assert entry["settings"]["image_size"] == 224 and "lr" not in entry["settings"]

    gpu = FakeGpu(300, saturating)
    second = search(gpu, cache=cache_for(tmp_path))
    assert second["method"] == "cached" and second["found"] == 144
    assert gpu.steps == [144]  # one step re-validates it
    assert second["cache"]["used"] and second["cache"]["found_at"] == entry["found_at"]
    assert second["cache"]["found_by"] == "trial+throughput"


def test_a_cached_batch_that_no_longer_fits_is_searched_afresh(tmp_path):
    search(FakeGpu(300, saturating), cache=cache_for(tmp_path))
    record = search(FakeGpu(100, saturating), cache=cache_for(tmp_path))
    assert record["method"] == "trial+throughput" and record["largest"] == 96
    assert record["probes"][0] == {"batch_size": 144, "fits": False, "seconds": 0.0}
    assert "no longer fits" in record["cache"]["note"]
    assert cache_for(tmp_path).lookup()[0]["batch_size"] == record["found"]


def test_processes_that_disagree_on_the_cache_search_afresh(tmp_path):
    search(FakeGpu(300, saturating), cache=cache_for(tmp_path))
    gpu = FakeGpu(300, saturating)
    record = search(gpu, cache=cache_for(tmp_path),
                    gather=lambda v: [v, 0] if isinstance(v, int) and not isinstance(v, bool) else [v, v])
    assert record["method"] == "trial+throughput" and "differ" in record["cache"]["note"]


def test_an_entry_others_could_write_is_ignored(tmp_path):
    search(FakeGpu(300, saturating), cache=cache_for(tmp_path))
    path = tmp_path / "batch-cache" / f"{cache_for(tmp_path).key}.json"
    os.chmod(path, 0o666)
    entry, why = cache_for(tmp_path).lookup()
    assert entry is None and "only you" in why
    os.chmod(path, 0o644)
    os.chmod(tmp_path / "batch-cache", 0o777)
    entry, why = cache_for(tmp_path).lookup()
    assert entry is None and "written by others" in why


def test_a_linked_entry_is_never_read(tmp_path):
    real = search(FakeGpu(300, saturating), cache=cache_for(tmp_path / "real"))
    key = real["cache"]["key"]
    (tmp_path / "state" / "batch-cache").mkdir(parents=True, mode=0o755)
    os.chmod(tmp_path / "state", 0o755)
    (tmp_path / "state" / "batch-cache" / f"{key}.json").symlink_to(
        tmp_path / "real" / "batch-cache" / f"{key}.json")
    entry, why = cache_for(tmp_path / "state").lookup()
    assert entry is None and "cannot be read" in why


def test_a_forged_entry_is_ignored(tmp_path):
    cache = cache_for(tmp_path)
    (tmp_path / "batch-cache").mkdir(mode=0o755)
    path = tmp_path / "batch-cache" / f"{cache.key}.json"
    path.write_text(json.dumps({"format": 1, "key": cache.key, "batch_size": -4}))
    assert "no positive batch size" in cache.lookup()[1]
    path.write_text("{")
    assert "not JSON" in cache.lookup()[1]


def test_a_state_folder_others_can_write_gets_no_entry(tmp_path):
    (tmp_path / "state").mkdir()
    os.chmod(tmp_path / "state", 0o777)
    record = search(FakeGpu(300, saturating), cache=cache_for(tmp_path / "state"))
    assert record["cache"]["stored"] is False and "written by others" in record["cache"]["not_stored"]
    assert not (tmp_path / "state" / "batch-cache").exists()


def test_the_cache_follows_hpcai_state_dir_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCAI_STATE_DIR", str(tmp_path / "s"))
    cache = batch_cache.BatchCache(cache_for(tmp_path).description)
    assert cache.store(64, "trial") is None
    assert (tmp_path / "s" / "batch-cache" / f"{cache.key}.json").is_file()
    assert batch_cache.enabled({}) and batch_cache.enabled({"HPCAI_BATCH_CACHE": "on"})
    assert not batch_cache.enabled({"HPCAI_BATCH_CACHE": "off"})
    assert not batch_cache.enabled({"HPCAI_BATCH_CACHE": "0"})


def test_only_the_writer_writes(tmp_path):
    cache = cache_for(tmp_path)
    cache.writer = False
    assert "another process" in cache.store(64, "trial")
    assert not (tmp_path / "batch-cache").exists()


def test_a_pytorch_run_keys_its_gpu_its_workload_and_its_pick(monkeypatch):
    """torch_batch_cache on a stand-in CUDA context: torch.cuda's device properties
    are the vendor boundary (total_memory, as torch.cuda.get_device_properties gives it)."""
    import types

    import torch

    from hpcai.workloads import distributed

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(total_memory=85 * 2**30))
    monkeypatch.setattr(distributed, "device_name", lambda ctx: "NVIDIA H100 80GB HBM3")
    trainer = types.SimpleNamespace(spec={"workload": "vit-l16", "params": {"image_size": 224, "lr": 1e-4}})
    ctx = types.SimpleNamespace(device_type="cuda", device=0, distributed=False, local_rank=0)
    fastest = bs.torch_batch_cache(trainer, ctx, fastest=True)
    assert fastest.description["memory_bytes"] == 85 * 2**30 and fastest.writer
    assert fastest.description["settings"] == {"ddp": False, "image_size": 224, "pick": "fastest"}
    assert bs.torch_batch_cache(trainer, ctx, fastest=False).key != fastest.key
    monkeypatch.setenv("HPCAI_BATCH_CACHE", "off")
    assert bs.torch_batch_cache(trainer, ctx, fastest=True) is None
    monkeypatch.delenv("HPCAI_BATCH_CACHE")
    assert bs.torch_batch_cache(trainer, types.SimpleNamespace(device_type="cpu"), fastest=True) is None


def test_a_tensorflow_run_keys_its_replicas_and_xla_and_says_when_the_cache_is_off(monkeypatch):
    """The Keras ResNet-50 (one process, every GPU) uses the same cache rule as
    PyTorch: its replica count and XLA are its memory-relevant settings."""
    spec = {"workload": "resnet50", "params": {"image_size": 224}, "preset_kind": "fast"}
    assert bs.picks_fastest(spec) and not bs.picks_fastest({**spec, "preset_kind": "paper"})
    one = bs.gpu_batch_cache(spec, "NVIDIA H100 80GB HBM3", None, "tensorflow 2.20.0", True, True,
                             replicas=1, xla=True)
    assert one.description["settings"] == {"image_size": 224, "pick": "fastest", "replicas": 1, "xla": True}
    assert bs.gpu_batch_cache(spec, "NVIDIA H100 80GB HBM3", None, "tensorflow 2.20.0", True, True,
                              replicas=4, xla=True).key != one.key
    monkeypatch.setenv("HPCAI_BATCH_CACHE", "off")
    assert bs.gpu_batch_cache(spec, "NVIDIA H100 80GB HBM3", None, "tensorflow 2.20.0", True, True) is None
    record = {}
    bs.note_cache_off(record, True, None)
    assert record["cache"] == {"used": False, "note": "HPCAI_BATCH_CACHE=off"}
    bs.note_cache_off(cpu := {}, False, None)
    assert cpu == {}


def test_the_records_fit_the_result_schema(tmp_path):
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "hpcai" / "schema" / "result-v1.schema.json").read_text())
    search_schema = schema["properties"]["config"]["properties"]["batch_size_search"]
    fresh = search(FakeGpu(300, saturating), cache=cache_for(tmp_path))
    cached = search(FakeGpu(300, saturating), cache=cache_for(tmp_path))
    for record in (fresh, cached, search(FakeGpu(300, saturating), fastest=False)):
        jsonschema.validate(json.loads(json.dumps(record)), search_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(dict(cached, method="guessed"), search_schema)
