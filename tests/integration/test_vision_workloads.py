"""The vision workloads for real on the CPU, through `hpcai-launch`:
ViT-L/16 and Stable Diffusion v2 (shrunk by their `tiny` presets) with two
gloo processes, TensorFlow's ResNet-50 in one process, and `--batch-size
auto`. Nothing here is faked: no GPU library is involved (cpu_node)."""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import ROOT, assert_valid_result

pytestmark = pytest.mark.slow


def run_ok(node, *args):
    done = node.launch(*args, "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    doc = node.only_result()
    return doc, done


def assert_complete(doc, schema, processes, images):
    assert_valid_result(doc, schema)
    assert doc["status"] == "complete" and doc["error"] is None
    assert doc["config"]["processes"] == processes
    assert doc["throughput"]["unit"] == "images/s" and doc["throughput"]["node"] > 0
    assert doc["work"]["measured_units"] == images
    # Every result carries FLOPs, so achieved TFLOP/s; a CPU has no known peak.
    tp, config = doc["throughput"], doc["config"]
    assert config["flops_per_unit"] > 0
    assert tp["achieved_tflops_node"] == pytest.approx(tp["node"] * config["flops_per_unit"] / 1e12)
    assert tp["fraction_of_peak"] is None and tp["peak_tflops_node"] is None
    assert "no known peak" in config["peak_tflops"]["reason"]
    # ... and bytes moved per image, an upper bound, so the arithmetic intensity
    assert config["bytes_per_unit"] > 0 and "upper bound" in config["bytes_method"]


def test_vit_l16_tiny(cpu_node, result_schema):
    doc, done = run_ok(cpu_node, "vit-l16", "--preset", "tiny")
    # 2 processes x batch 4 x 2 steps x 2 measured epochs
    assert_complete(doc, result_schema, processes=2, images=2 * 4 * 2 * 2)
    config = doc["config"]
    assert config["model_size"] == "tiny" and config["shrunk"]["num_layers"] == 2
    assert config["architecture"]["patch_size"] == 16 and config["image_size"] == 64
    assert config["optimizer"].startswith("AdamW")
    assert "vit-l16 tiny:" in done.stdout
    # The MLPerf-format log beside it, read back with mlperf-logging's own parser.
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    assert doc["sidecar"]["mllog"] == "mllog.txt" and doc["sidecar"]["mllog_reason"] is None
    lines, errors = parse_file(str(cpu_node.result_paths()[0].parent / "mllog.txt"), ruleset="6.1.0")
    keys = [x.key for x in lines]
    assert not errors and keys.count("epoch_start") == len(doc["epochs"]) and "run_stop" in keys
    assert [x.value["value"] for x in lines if x.key == "throughput"] == [doc["throughput"]["node"]]


def test_sd2_tiny_trains_the_unet_and_freezes_the_rest(cpu_node, result_schema):
    doc, _ = run_ok(cpu_node, "sd2", "--preset", "tiny")
    assert_complete(doc, result_schema, processes=2, images=2 * 2 * 2 * 2)
    config = doc["config"]
    parts = config["components"]
    assert parts["unet"]["trained"] is True
    assert parts["vae"]["trained"] is False and parts["vae"]["parts_used"] == "encoder"
    assert parts["text_encoder"]["trained"] is False
    assert config["scheduler"]["prediction_type"] == "v_prediction"
    assert config["weights"] == "random" and config["latents_precomputed"] is False
    assert config["shrunk"]["unet"]["block_out_channels"] == [32, 64]
    by_part = config["flops"]["per_image_by_part"]
    assert config["flops_per_unit"] == pytest.approx(
        by_part["vae_encode"] + by_part["text_encode"] + by_part["unet_train"])
    assert doc["work"]["first_loss"] > 0


def test_sd2_refuses_a_missing_weights_folder(cpu_node, tmp_path):
    done = cpu_node.launch("sd2", "--preset", "tiny", "--nproc", "1", "--weights",
                           str(tmp_path / "nowhere"), "-o", str(cpu_node.results))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hpcai-launch: error: run failed: --weights ")
    assert "does not exist" in last and "diffusers-format" in last
    doc = cpu_node.only_result()
    assert doc["status"] == "failed" and doc["error"]["type"] == "ConfigError"


def test_tensorflow_resnet50_tiny_never_imports_torch(cpu_node, result_schema, tmp_path):
    # The TensorFlow image has no PyTorch: make it unimportable, as there.
    blocker = tmp_path / "no_torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('torch is blocked in this test')\n")
    cpu_node.env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), cpu_node.env["PYTHONPATH"]])
    doc, done = run_ok(cpu_node, "resnet50", "--impl", "tensorflow", "--preset", "tiny")
    # One process: the launcher does not use torchrun for the TensorFlow impl.
    assert_complete(doc, result_schema, processes=1, images=4 * 2 * 2)
    assert doc["spec"]["impl"] == "tensorflow" and doc["software"]["framework"] == "tensorflow"
    config = doc["config"]
    assert config["model"] == "keras.applications.ResNet50" and config["backend"] is None
    assert config["precision"] == "fp32" and config["flops"]["method"].startswith("analytic")
    assert doc["memory"]["kind"] == "host_rss" and doc["memory"]["peak_bytes"] > 0
    assert "resnet50 tiny:" in done.stdout


def test_tensorflow_mirrored_strategy_over_two_cpu_devices(cpu_node, tmp_path, result_schema):
    """MirroredStrategy's multi-replica path, on two logical CPU devices."""
    dry = cpu_node.launch("resnet50", "--impl", "tensorflow", "--preset", "tiny",
                          "--warmup-epochs", "0", "--epochs", "1", "--steps-per-epoch", "1",
                          "--dry-run", "--json", "-o", str(tmp_path / "r"))
    assert dry.returncode == 0, dry.stderr
    spec = json.loads(dry.stdout.split("\ncommand: ")[0])
    spec["params"].update(cpu_replicas=2, image_size=32)
    spec["output_dir"] = str(tmp_path / "out")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, "-m", "hpcai.workloads", "run", "--spec",
                           str(tmp_path / "spec.json")], env=cpu_node.env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert_valid_result(doc, result_schema)
    config = doc["config"]
    assert config["strategy"] == "MirroredStrategy" and config["replicas"] == 2
    assert config["batch_size_per_replica"] == 4 and config["global_batch_size"] == 8
    assert doc["work"]["measured_units"] == 8  # 2 replicas x 4 images, one step
    assert doc["status"] == "complete" and doc["throughput"]["per_gpu"] == doc["throughput"]["node"]


def test_resnet50_batch_size_auto_on_cpu(cpu_node, result_schema):
    doc, _ = run_ok(cpu_node, "resnet50", "--preset", "tiny", "--batch-size", "auto",
                    "--epochs", "1", "--steps-per-epoch", "1")
    config = doc["config"]
    search = config["batch_size_search"]
    assert_complete(doc, result_schema, processes=2, images=2 * search["found"])
    assert doc["spec"]["params"]["batch_size"] == "auto"
    assert search["requested"] == "auto"
    assert [p["batch_size"] for p in search["probes"]][:4] == [1, 1, 2, 4]
    if search["method"] == "fallback":  # no growth measured twice: said, and the preset's batch
        assert search["usable"] is False and search["reason"]
        assert search["found"] == doc["config"]["batch_size_search"]["start"]
    else:
        assert search["method"] == "memory-model"
        assert search["per_image_bytes"] > 0 and search["memory_budget_bytes"] > 0
        assert 1 <= search["found"] <= search["maximum"] == 64
    assert config["batch_size_per_process"] == search["found"]
    # The learning rate follows the batch found (0.1 per 256 images).
    assert config["learning_rate"] == pytest.approx(0.1 * 2 * search["found"] / 256)


def test_sd2_loads_real_weights_from_a_local_folder(tmp_path):
    """--weights: a diffusers-format folder (written here from a random tiny
    model) is loaded instead of random weights; nothing is downloaded."""
    import torch

    from hpcai.workloads.distributed import Context
    from hpcai.workloads.sd2 import StableDiffusion2

    ctx = Context(0, 1, 0, 1, "cpu", torch.device("cpu"), None, 2, socket.gethostname())
    spec = {"workload": "sd2", "preset": "tiny", "seed": 0,
            "params": {"batch_size": 1, "image_size": 32, "model_size": "tiny",
                       "precision": "fp32"}}
    original = StableDiffusion2(spec, ctx)
    original.module.save_pretrained(tmp_path / "unet")
    original.vae.save_pretrained(tmp_path / "vae")
    original.text_encoder.save_pretrained(tmp_path / "text_encoder")

    spec["params"]["weights"] = str(tmp_path)
    spec["seed"] = 1  # random weights would differ
    loaded = StableDiffusion2(spec, ctx)
    for a, b in zip(original.module.parameters(), loaded.module.parameters()):
        assert torch.equal(a, b)
    assert loaded.describe()["weights"] == str(tmp_path)
    assert loaded.step() == 1 and loaded.latest_loss() > 0


def test_sd2_channels_last_puts_unet_vae_and_images_in_nhwc_and_compiles_the_frozen_parts():
    """SD2 `fast` (issue 43): channels-last for the UNet and the VAE (their convolutions)
    and their inputs; with --compile the frozen VAE encoder and text tower are compiled
    too, not only the UNet. (Compilation itself is lazy: nothing compiles here.)"""
    import torch

    from hpcai.workloads.distributed import Context
    from hpcai.workloads.sd2 import StableDiffusion2

    ctx = Context(0, 1, 0, 1, "cpu", torch.device("cpu"), None, 2, socket.gethostname())
    spec = {"workload": "sd2", "preset": "tiny", "seed": 0,
            "params": {"batch_size": 1, "image_size": 32, "model_size": "tiny",
                       "precision": "fp32", "channels_last": True}}
    sd2 = StableDiffusion2(spec, ctx)
    conv = next(m for m in sd2.module.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    vae_conv = next(m for m in sd2.vae.modules() if isinstance(m, torch.nn.Conv2d))
    assert vae_conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert sd2.images.is_contiguous(memory_format=torch.channels_last)
    assert sd2.step() == 1 and sd2.latest_loss() > 0
    assert sd2.describe()["channels_last"] is True

    spec["params"].update(channels_last=False, compile=True)
    compiled = StableDiffusion2(spec, ctx)
    assert not compiled.images.is_contiguous(memory_format=torch.channels_last)
    for part in (compiled.encode_images, compiled.encode_text):
        assert hasattr(part, "_torchdynamo_orig_callable")  # what torch.compile returns
    assert compiled.describe()["frozen_parts_compiled"] is True
