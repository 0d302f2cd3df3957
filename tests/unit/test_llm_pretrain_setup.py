"""LitGPT pretraining: how steps become epochs, the FLOP count, and bad input."""
import json
import socket

import pytest

from hpcai.errors import UsageError
from hpcai.workloads import distributed
from hpcai.workloads import llm_pretrain as P
from hpcai.workloads.catalog import LLAMA3_8B_PRETRAIN
from hpcai.workloads.protocol import Progress


def feed(clock, ends, iter_time=0.5, losses=None):
    """Steps ending at the given wall times (perf counter = wall - 1000)."""
    done = []
    for i, end in enumerate(ends):
        loss = losses[i] if losses else 10.0 - i
        done.append(clock.step(end, end - 1000.0, iter_time, loss))
    return done


def test_steps_are_grouped_into_the_protocol_s_epochs():
    progress, seen = Progress(), []
    protocol = {"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2}
    clock = P.EpochClock(protocol, tokens_per_step=128, progress=progress,
                         on_epoch=lambda e, total: seen.append((e.index, total)))
    assert clock.total_steps == 6
    done = feed(clock, [100.0, 101.0, 103.0, 104.0, 104.5, 105.0])
    assert done == [False] * 5 + [True]
    epochs = progress.epochs
    assert [e.warmup for e in epochs] == [True, False, False]
    # The first epoch starts at its first step's end minus that step's own time;
    # each later one where the previous ended, so nothing falls between them.
    assert epochs[0].start == 99.5 and epochs[0].end == 101.0
    assert (epochs[1].start, epochs[1].end) == (101.0, 104.0)
    assert (epochs[2].start, epochs[2].end) == (104.0, 105.0)
    assert [e.duration_s for e in epochs] == pytest.approx([1.5, 3.0, 1.0])
    assert all(e.units == 2 * 128 and e.steps == 2 for e in epochs)
    assert [e.loss for e in epochs] == [9.0, 7.0, 5.0]  # the epoch's last step
    assert progress.first_loss == 10.0
    assert seen == [(0, 3), (1, 3), (2, 3)]
    assert [s["epoch"] for s in clock.steps] == [0, 0, 1, 1, 2, 2]
    assert [s["step"] for s in clock.measured_steps()] == [3, 4, 5, 6]


def test_an_unfinished_epoch_is_not_reported():
    progress = Progress()
    clock = P.EpochClock({"warmup_epochs": 0, "epochs": 2, "steps_per_epoch": 3}, 64, progress)
    feed(clock, [1.0, 2.0, 3.0, 4.0])
    assert len(progress.epochs) == 1 and not progress.epochs[0].warmup
    assert [s["step"] for s in clock.measured_steps()] == [1, 2, 3]
    assert not clock.done


def test_an_in_run_segment_s_metrics_hold_only_its_own_steps(tmp_path):
    """In-run, one LitGPT loop measures every cap: a segment's workload metrics
    (its step list, LitGPT's iteration-time cross-check) are its own steps, not
    those of the caps measured before it in the same process."""
    import time

    def program():
        yield (2, True)  # warm-up, epoch 0
        yield (2, False)  # segment A, epoch 1: LitGPT's iterations take 1 s
        yield (3, False)  # segment B, epoch 2: 0.25 s

    workload = P.build(spec(tmp_path), cpu_ctx())
    progress = Progress()
    clock = workload.clock = P.ProgramClock({"warmup_epochs": 1, "epochs": 2,
                                             "steps_per_epoch": 2}, 128, progress, None, program())
    for iter_time in [1.0, 1.0, 1.0, 1.0, 0.25, 0.25, 0.25]:
        clock.step(time.time(), time.perf_counter(), iter_time, 5.0)
    assert clock.done and len(progress.epochs) == 3
    whole, segment_b = workload.metrics(), workload.segment_metrics(2)
    assert len(whole["steps"]) == 7
    assert [s["epoch"] for s in segment_b["steps"]] == [2, 2, 2]
    assert segment_b["cross_check"]["tokens_per_s_from_litgpt_iter_time"] == pytest.approx(128 / 0.25)
    assert whole["cross_check"]["tokens_per_s_from_litgpt_iter_time"] == pytest.approx(
        5 * 128 / (2 * 1.0 + 3 * 0.25))
    epoch_b = progress.epochs[2]
    assert segment_b["tokens_per_s_rank0"] == pytest.approx(epoch_b.units / epoch_b.duration_s)


def test_flops_per_token_match_the_analytic_count():
    """PyTorch's counter on LitGPT's model agrees with 6N + 12 L d T (N without
    the input embedding, which is a lookup)."""
    params = LLAMA3_8B_PRETRAIN.presets["short"].params
    config = P.model_config(params, None)
    flops, parameters = P.train_flops_per_token(config, 256)
    matmul_params = parameters - config.padded_vocab_size * config.n_embd
    analytic = 6 * matmul_params + 12 * config.n_layer * config.n_embd * 256
    assert flops == pytest.approx(analytic, rel=0.01)


def test_the_paper_model_is_llama3_8b():
    config = P.model_config(LLAMA3_8B_PRETRAIN.presets["paper"].params, None)
    assert (config.name, config.n_layer, config.n_embd, config.padded_vocab_size) == \
        ("Llama-3-8B", 32, 4096, 128256)


def test_compile_switch_is_restored():
    import torch._dynamo

    before = torch._dynamo.config.disable
    with P.dynamo_disabled(True):
        assert torch._dynamo.config.disable is True
    assert torch._dynamo.config.disable == before


# ---- bad input: one-line errors before anything runs -------------------------------

def cpu_ctx():
    return distributed.Context(0, 1, 0, 1, "cpu", None, None, 1, socket.gethostname())


def spec(tmp_path, **params):
    return {"params": {**LLAMA3_8B_PRETRAIN.presets["tiny"].params, **params},
            "output_dir": str(tmp_path / "run"), "seed": 0}


def make_tokenizer(folder, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


def texts(folder, n):
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"part{i}.txt").write_text("w1 w2 w3 " * 50)
    return folder


@pytest.mark.parametrize("params,expected", [
    ({"batch_size": "auto"}, "--batch-size auto is not supported"),
    ({"seq_len": 65}, "--seq-len 65 is outside 1-64"),
    ({"model": "Llama-9-1T", "model_overrides": None}, "LitGPT knows no model 'Llama-9-1T'"),
    ({"data": "/nonexistent/corpus"}, "data folder '/nonexistent/corpus' not found"),
    ({"weights": "/nonexistent/ckpt"}, "checkpoint folder '/nonexistent/ckpt' not found"),
])
def test_bad_parameters_are_one_line_usage_errors(tmp_path, params, expected):
    with pytest.raises(UsageError) as err:
        P.build(spec(tmp_path, **params), cpu_ctx())
    assert expected in err.value.one_line() and "\n" not in err.value.one_line()


def test_text_data_needs_two_files_and_a_tokenizer_that_fits(tmp_path):
    one = texts(tmp_path / "one", 1)
    with pytest.raises(UsageError, match="needs at least two"):
        P.build(spec(tmp_path, data=str(one)), cpu_ctx())
    corpus = texts(tmp_path / "corpus", 2)
    with pytest.raises(UsageError, match="needs the model's tokenizer"):
        P.build(spec(tmp_path, data=str(corpus)), cpu_ctx())
    big = make_tokenizer(tmp_path / "big", 600)  # the tiny model has 512 ids
    with pytest.raises(UsageError, match="has 600 tokens, more than"):
        P.build(spec(tmp_path, data=str(corpus), tokenizer=str(big)), cpu_ctx())
    fits = make_tokenizer(tmp_path / "fits", 300)
    workload = P.build(spec(tmp_path, data=str(corpus), tokenizer=str(fits)), cpu_ctx())
    assert workload.describe()["data"] == f"text files in {corpus.resolve()}"


def test_weights_folder_needs_a_litgpt_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "models" / "ckpt").mkdir(parents=True)
    monkeypatch.setenv("HPCAI_MODELS_DIR", str(tmp_path / "models"))
    with pytest.raises(UsageError, match="holds no lit_model.pth"):
        P.build(spec(tmp_path, weights="ckpt"), cpu_ctx())


@pytest.mark.parametrize("global_batch,micro,world,expected", [
    (64, 4, 4, 4),  # the paper's: 64 sequences over 4 GPUs of micro-batch 4
    (64, 4, 8, 2), (64, 4, 1, 16), (None, 4, 4, 1), (16, 4, 4, 1)])
def test_accumulation_follows_from_global_and_micro_batch(global_batch, micro, world, expected):
    assert P.accumulation_steps(global_batch, micro, world) == expected


@pytest.mark.parametrize("global_batch", [8, 24, 65])
def test_a_global_batch_that_does_not_divide_is_a_usage_error(global_batch):
    with pytest.raises(UsageError, match="--global-batch-size"):
        P.accumulation_steps(global_batch, 4, 4)


@pytest.mark.parametrize("gpus, accumulated", [(1, 32), (4, 8), (8, 4), (32, 1)])
def test_the_fast_preset_accumulates_to_64_sequences_of_2048_tokens(gpus, accumulated):
    """`fast` (issue 43): an optimizer step every 64 x 2048 tokens, on any usual node size,
    not one per 2,048-token micro-batch per GPU."""
    params = LLAMA3_8B_PRETRAIN.preset("fast").params
    micro = params["batch_size"]
    assert micro >= 2 and params["seq_len"] == 2048
    assert P.accumulation_steps(params["global_batch_size"], micro, gpus) == accumulated
    assert micro * accumulated * gpus == 64
