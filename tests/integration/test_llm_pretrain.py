"""`hpcai-launch llama3-8b-pretrain --preset tiny` for real: LitGPT's own
pretraining loop on a two-layer Llama-style model, on the CPU. GPU power
readings come from the FAKE pynvml (tests/fakes).
"""
import json
import random

import pytest

from conftest import assert_valid_result

pytestmark = pytest.mark.slow
TINY = ["llama3-8b-pretrain", "--preset", "tiny"]
WORDS = ("power energy token model cap watt node gpu train serve measure window sample "
         "the a of and to in is for on with").split()


def make_corpus_and_tokenizer(root):
    """Three text files and a byte-level BPE tokenizer trained on them, as
    LitGPT wants it (tokenizer.json + tokenizer_config.json)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    data, tok_dir = root / "corpus", root / "tokenizer"
    data.mkdir()
    tok_dir.mkdir()
    texts = []
    for i in range(3):
        text = " ".join(rng.choice(WORDS) for _ in range(2000))
        (data / f"part{i}.txt").write_text(text)
        texts.append(text)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "add_bos_token": True}))
    return data, tok_dir


def test_text_files_two_processes_with_power(fake_nvidia_node, tmp_path, result_schema):
    """Text from the site's data folder, the tokenizer from the models folder,
    two CPU processes (DDP: Lightning has no FSDP on CPUs), FAKE GPU power."""
    node = fake_nvidia_node
    data, _ = make_corpus_and_tokenizer(tmp_path)
    node.env.update({"HPCAI_DATA_DIR": str(tmp_path), "HPCAI_MODELS_DIR": str(tmp_path)})
    before = sorted(p.name for p in data.iterdir())
    done = node.launch(*TINY, "--device", "cpu", "--data", "corpus", "--tokenizer", "tokenizer",
                       "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete"
    cfg = doc["config"]
    assert cfg["processes"] == 2 and cfg["strategy"] == "ddp" and cfg["global_batch_size"] == 4
    assert cfg["data"] == f"text files in {data.resolve()}"
    assert doc["throughput"]["node"] > 0 and len(doc["ranks"]) == 2
    assert all(r["throughput"] > 0 for r in doc["ranks"])
    # 2 processes x batch 2 x 64 tokens x 3 steps x 2 measured epochs.
    assert doc["work"]["measured_units"] == 2 * 2 * 64 * 3 * 2
    steps = doc["workload_metrics"]["steps"]
    assert len(steps) == 9 and all(s["loss"] > 0 for s in steps)
    assert [s["warmup"] for s in steps] == [True] * 3 + [False] * 6
    assert doc["work"]["first_loss"] == steps[0]["loss"]
    assert doc["work"]["last_loss"] == steps[-1]["loss"]
    # Epochs follow each other without gaps and end at their last step.
    epochs = doc["epochs"]
    assert [e["end"] for e in epochs] == [steps[i]["end"] for i in (2, 5, 8)]
    assert all(a["end"] == b["start"] for a, b in zip(epochs, epochs[1:]))
    # The step clock is wall-clock time: the window lies inside the power
    # samples, and the energy counter read there agrees with the steady draw.
    power = doc["power"]
    assert power["available"] and power["energy_source"] == "counter"
    assert power["window_s"] == pytest.approx(epochs[-1]["end"] - epochs[1]["start"])
    draw_w = sum(g["power_w"]["mean"] for g in doc["gpus"])
    assert power["energy_j"] == pytest.approx(draw_w * power["window_s"], rel=0.05)
    assert power["energy_per_unit_j"] > 0
    # LitGPT tokenized into the run's folder and left the data folder alone.
    run = node.result_paths()[0].parent
    assert (run / "litgpt" / "data" / "train").is_dir()
    assert sorted(p.name for p in data.iterdir()) == before
    assert "tokens/s (node)" in done.stdout


def test_synthetic_tokens_one_process(cpu_node, result_schema):
    done = cpu_node.launch(*TINY, "--data", "synthetic", "--nproc", "1", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    doc = cpu_node.only_result()
    assert_valid_result(doc, result_schema)
    assert doc["status"] == "complete"
    assert doc["config"]["strategy"] == "single-device" and doc["config"]["processes"] == 1
    assert doc["config"]["data"] == "synthetic (random token ids)"
    assert doc["work"]["measured_units"] == 2 * 64 * 3 * 2
    # Without bf16-true the weights stay fp32 (autocast, or fp32 on CPUs without bf16).
    assert doc["config"]["parameter_dtypes"] == ["float32"]
    assert doc["config"]["gradient_accumulation_steps"] == 1
    assert doc["throughput"]["node"] > 0
    metrics = doc["workload_metrics"]
    assert metrics["tokens_per_s_rank0"] == pytest.approx(doc["throughput"]["node"])
    # The analytic FLOPs per token of this model, as the unit test checks them.
    assert doc["config"]["flops_per_unit"] == pytest.approx(2.7648e6)
    assert doc["throughput"]["achieved_tflops_node"] == pytest.approx(
        doc["throughput"]["node"] * 2.7648e6 / 1e12)
    assert doc["config"]["peak_tflops"]["tflops_node"] is None  # no peak known for CPUs
    # Bytes moved per token, counted in the same pass: an upper bound, so intensity is a lower one.
    assert doc["config"]["bytes_per_unit"] > 0 and "upper bound" in doc["config"]["bytes_method"]
    assert metrics["cross_check"]["tokens_per_s_from_litgpt_iter_time"] > 0
    # No checkpoint: the run ends before LitGPT's final save.
    run = cpu_node.result_paths()[0].parent
    assert not list(run.rglob("*.pth"))


def test_a_missing_data_folder_is_a_one_line_error(cpu_node):
    done = cpu_node.launch(*TINY, "--data", "no-such-corpus", "--nproc", "1",
                           "-o", str(cpu_node.results))
    assert done.returncode == 3
    error = [line for line in done.stderr.splitlines() if line.startswith("hpcai-launch: error")]
    assert len(error) == 1 and "data folder 'no-such-corpus' not found" in error[0], done.stderr
    assert "HPCAI_DATA_DIR" in error[0]
    assert cpu_node.only_result()["status"] == "failed"


def test_gradient_accumulation_and_bf16_true(cpu_node, result_schema):
    """The paper's pretraining settings for real on the tiny model: a global
    batch above micro-batch x processes accumulates gradients (LitGPT's
    TrainArgs), and bf16-true keeps parameters and AdamW state in bf16."""
    done = cpu_node.launch(*TINY, "--nproc", "2", "--batch-size", "2", "--global-batch-size", "8",
                           "--precision", "bf16-true", "-o", str(cpu_node.results))
    assert done.returncode == 0, done.stderr
    doc = cpu_node.only_result()
    assert_valid_result(doc, result_schema)
    cfg = doc["config"]
    # 8 sequences per optimizer step = 2 per micro-batch x 2 processes x 2 accumulated.
    assert cfg["gradient_accumulation_steps"] == 2 and cfg["global_batch_size"] == 8
    assert cfg["tokens_per_step_per_process"] == 2 * 2 * 64
    assert cfg["precision"] == "bf16-true" and cfg["fabric_precision"] == "bf16-true"
    assert cfg["parameter_dtypes"] == ["bfloat16"]
    assert cfg["optimizer_state_dtypes"] == ["bfloat16"]
    steps = doc["workload_metrics"]["steps"]
    # One logged step per optimizer step, two micro-batches (LitGPT iterations) each.
    assert [s["optimizer_step"] for s in steps] == list(range(1, 10))
    assert [s["iter"] for s in steps] == list(range(2, 20, 2))
    assert [b["tokens_this_rank"] - a["tokens_this_rank"] for a, b in zip(steps, steps[1:])] \
        == [2 * 2 * 64] * 8
    # Units: 2 processes x 256 tokens per optimizer step x 3 steps x 2 measured epochs.
    assert doc["work"]["measured_units"] == 2 * 256 * 3 * 2
    assert doc["comparability"]["comparable_to_paper"] is False  # a test preset on the CPU
