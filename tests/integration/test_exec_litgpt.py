"""LitGPT's own `litgpt pretrain` command line under `hpcai-launch exec`
(issue 30 §3): a two-layer Llama-style model, its config, corpus and tokenizer
made here (no hub), on the CPU; throughput from LitGPT's own log lines
("Epoch 1 | iter 3 step 3 | loss train: ..."), one interval per line. The GPUs
are FAKES (tests/fakes, NVML's boundary) so the cap is set and restored for real.
"""
import shutil
import sys
from pathlib import Path

import pytest

from conftest import assert_valid_result
from test_llm_pretrain import make_corpus_and_tokenizer

pytestmark = pytest.mark.slow
MODEL = {"name": "tiny-llama-exec", "block_size": 64, "vocab_size": 400, "padded_vocab_size": 512,
         "n_layer": 2, "n_embd": 64, "n_head": 4, "n_query_groups": 2, "intermediate_size": 172,
         "bias": "false", "norm_class_name": "RMSNorm", "mlp_class_name": "LLaMAMLP",
         "parallel_residual": "false", "rotary_percentage": 1.0}
ITERS, MICRO_BATCH = 5, 4


def pretrain_command(root):
    """`litgpt pretrain` with its config file (model_config inline, as LitGPT's
    config_hub/pretrain files have it)."""
    data, tokenizer = make_corpus_and_tokenizer(root)
    config = root / "pretrain.yaml"
    config.write_text("model_name: tiny-llama-exec\nmodel_config:\n"
                      + "".join(f"  {k}: {v}\n" for k, v in MODEL.items()))
    # LitGPT's console script, beside this Python (hpcai's llm extra installs it).
    litgpt = shutil.which("litgpt", path=str(Path(sys.executable).parent))
    assert litgpt is not None, f"no litgpt beside {sys.executable}: pip install '.[llm]' in the checkout"
    return [litgpt, "pretrain", "--config", str(config), "--data", "TextFiles",
            "--data.train_data_path", str(data), "--data.num_workers", "1",
            "--tokenizer_dir", str(tokenizer), "--out_dir", str(root / "litgpt-out"),
            "--precision", "32-true", "--devices", "1",
            "--train.max_tokens", str(ITERS * MICRO_BATCH * MODEL["block_size"]),
            "--train.micro_batch_size", str(MICRO_BATCH),
            "--train.global_batch_size", str(MICRO_BATCH), "--train.log_interval", "1",
            "--train.save_interval", "null", "--train.lr_warmup_steps", "1",
            "--eval.interval", "1000", "--eval.initial_validation", "false",
            "--eval.final_validation", "false", "--logger_name", "csv"]


@pytest.mark.timeout(3600)  # LitGPT's start-up alone takes minutes on a loaded machine
def test_litgpt_pretrain_cli_under_a_cap_with_throughput_from_its_log_lines(
        fake_nvidia_node, tmp_path, result_schema):
    node = fake_nvidia_node
    command = pretrain_command(tmp_path)
    done = node.launch("exec", "--cap", "300", "--units", "iters", "--progress-regex",
                       r"\| iter (?P<total>\d+) step \d+ \| loss train", "-o", str(node.results),
                       "--", *command, timeout=2400)
    assert done.returncode == 0, done.stderr[-3000:]
    result = node.only_result()
    assert_valid_result(result, result_schema)
    assert result["status"] == "complete" and result["throughput"]["unit"] == "iters/s"
    epochs = result["epochs"]
    # One interval per logged iteration; the first (start-up, data preparation) is warm-up.
    assert len(epochs) == ITERS and [e["warmup"] for e in epochs] == [True] + [False] * (ITERS - 1)
    assert all(e["units"] == 1 for e in epochs)
    assert result["work"]["measured_units"] == ITERS - 1
    measured = sum(e["duration_s"] for e in epochs[1:])
    assert result["throughput"]["node"] == pytest.approx((ITERS - 1) / measured)
    log = (node.results / result["run_id"] / "workload.log").read_text()
    assert "| Performance" in log  # LitGPT ran to its end
    assert result["power"]["cap"]["requested_w"] == 300 and node.limits() == [700.0, 700.0]
