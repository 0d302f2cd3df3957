"""FLOPs per image against published figures, the GPU peak table and the
fraction of peak, and the `--batch-size auto` searches."""
import socket

import pytest

from hpcai.errors import WorkloadError
from hpcai.workloads import batch_search as bs
from hpcai.workloads import flops

GIB = 2**30
MIB = 2**20


# ---- FLOPs ------------------------------------------------------------------------


def test_resnet50_forward_is_torchvisions_published_4_089_gmacs():
    import torchvision

    counted = flops.torch_image_model_flops(lambda: torchvision.models.resnet50(weights=None), 224)
    # torchvision's model table: ResNet50 4.09 "GFLOPS" (multiply-adds).
    assert counted["forward_per_image"] / 2 == pytest.approx(4.089e9, rel=0.002)
    # Backward costs about twice the forward (the first layer needs no input gradient).
    assert 2.9 < counted["train_per_image"] / counted["forward_per_image"] <= 3.0


def test_vit_l16_forward_is_torchvisions_published_61_6_gmacs():
    import torchvision

    counted = flops.torch_image_model_flops(lambda: torchvision.models.vit_l_16(weights=None), 224)
    # torchvision's model table: ViT_L_16 61.55 "GFLOPS" (multiply-adds), attention included.
    assert counted["forward_per_image"] / 2 == pytest.approx(61.555e9, rel=0.002)
    assert 2.95 < counted["train_per_image"] / counted["forward_per_image"] <= 3.0


def test_counting_on_the_meta_device_equals_counting_a_real_step():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    from torchvision.models.vision_transformer import VisionTransformer

    def build():
        return VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                 hidden_dim=32, mlp_dim=64, num_classes=10)

    on_meta = flops.torch_image_model_flops(build, 32)
    model = build()
    # The counter has no formula for the CPU's fused attention kernel; the math
    # kernel runs the same matrix products the meta device counts (and a GPU's
    # fused kernels are counted by formula).
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(torch.randn(2, 3, 32, 32)).float().sum().backward()
    assert on_meta["train_per_image"] == counter.get_total_flops() / 2
    assert any("bmm" in str(op) for op in counter.get_flop_counts()["Global"])  # attention


def test_keras_resnet50_is_the_resnet_papers_3_8_gmacs():
    import os

    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    model = keras.applications.ResNet50(weights=None)
    # He et al. (2016), Table 1: ResNet-50 3.8e9 FLOPs (multiply-adds); Keras' v1 has 3.86e9.
    assert flops.keras_forward_macs(model) == pytest.approx(3.86e9, rel=0.005)
    counted = flops.keras_image_model_flops(model)
    assert counted["train_per_image"] == 3 * counted["forward_per_image"]


def test_sd2_configs_build_the_published_model_sizes():
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    from hpcai.workloads import sd2_config

    cfg = sd2_config.configs("full")
    with torch.device("meta"):
        sizes = [sum(p.numel() for p in m.parameters()) for m in (
            UNet2DConditionModel.from_config(cfg["unet"]), AutoencoderKL.from_config(cfg["vae"]),
            CLIPTextModel(CLIPTextConfig(**cfg["text_encoder"])))]
    # SD 2.x: UNet 865.9M, VAE 83.7M, OpenCLIP ViT-H text tower (23 layers) 340.4M.
    assert sizes == [865_910_724, 83_653_863, 340_387_840]
    assert cfg["scheduler"]["prediction_type"] == "v_prediction" and cfg["shrunk"] is None
    tiny = sd2_config.configs("tiny")
    assert tiny["shrunk"]["unet"]["block_out_channels"] == tiny["unet"]["block_out_channels"]
    assert sd2_config.vae_downsampling(cfg["vae"]) == 8


# ---- peaks ----------------------------------------------------------------------


@pytest.mark.parametrize("name,gpu,bf16", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", "H100 NVL", 835.5),
    ("NVIDIA H200", "H200 SXM", 989.5),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 312.0),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 312.0),
    ("NVIDIA GH200 480GB", "GH200", 989.5),
    ("AMD Instinct MI300X", "MI300X", 1307.4),
    ("AMD Instinct MI250X", "MI250X (one GCD)", 191.5),
])
def test_gpu_names_find_their_datasheet_peak(name, gpu, bf16):
    peak = flops.peak_for(name, "bf16-mixed", 4)
    assert peak["gpu"] == gpu and peak["precision"] == "bf16"
    assert peak["tflops_per_device"] == bf16 and peak["tflops_node"] == 4 * bf16
    assert peak["source"] and peak["url"].startswith("https://") and peak["reason"] is None


@pytest.mark.parametrize("name", ["NVIDIA RTX A1000", "Tesla V100-SXM2-32GB",
                                  "Intel(R) Xeon(R) Platinum 8480+", None])
def test_an_unknown_device_has_no_peak_and_says_why(name):
    peak = flops.peak_for(name, "bf16-mixed", 1)
    assert peak["tflops_node"] is None and "no known peak" in peak["reason"]
    assert flops.fraction_of_peak(100.0, peak) is None


def test_a_precision_the_datasheet_lacks_has_no_peak():
    peak = flops.peak_for("AMD Instinct MI250X", "tf32", 2)
    assert peak["tflops_node"] is None and "no tf32 peak" in peak["reason"]


def test_the_peak_follows_the_runs_precision():
    assert flops.peak_for("NVIDIA H100 80GB HBM3", "fp32", 1)["tflops_per_device"] == 67.0
    assert flops.peak_for("NVIDIA H100 80GB HBM3", "tf32", 1)["tflops_per_device"] == 494.5
    assert flops.peak_for("NVIDIA H100 80GB HBM3", "fp16-mixed", 1)["tflops_per_device"] == 989.5


def test_table_is_dense_figures():
    from hpcai import devices

    for peak in devices.gpus():
        t = peak.tflops
        assert t["bf16"] == t["fp16"]
        if "tf32" in t:  # TF32 tensor throughput is half of the 16-bit types'
            # (B200's datasheet rounds its sparse TF32 to 2.2 PFLOP/s: 1100 dense, not 1125)
            assert t["tf32"] == pytest.approx(t["bf16"] / 2, rel=0.025)


def test_fraction_of_peak():
    peak = flops.peak_for("NVIDIA H100 80GB HBM3", "bf16-mixed", 4)
    assert flops.fraction_of_peak(0.5 * 4 * 989.5, peak) == pytest.approx(0.5)
    assert flops.fraction_of_peak(None, peak) is None
    assert flops.fraction_of_peak(100.0, None) is None


# ---- batch search: by trial (GPUs) -------------------------------------------------


class Device:
    """A memory limit as a GPU's allocator would enforce it: n images fit or not."""

    def __init__(self, limit):
        self.limit, self.tried = limit, []

    def fits(self, n):
        self.tried.append(n)
        return n <= self.limit


@pytest.mark.parametrize("limit,start,found", [
    (300, 256, 296),  # doubles past it, then bisects to a multiple of 8
    (20, 256, 16),  # halves until one fits, then bisects
    (5, 4, 5),  # below 8, to the image
    (1, 8, 1),
])
def test_trial_search_finds_the_largest_batch_that_fits(limit, start, found):
    device = Device(limit)
    assert bs.search_by_trial(device.fits, start) == found
    assert len(device.tried) == len(set(device.tried)), "no size is tried twice"
    assert len(device.tried) <= 10


def test_trial_search_is_capped():
    device = Device(10**9)
    assert bs.search_by_trial(device.fits, 256) == bs.GPU_MAX_BATCH


def test_trial_search_fails_when_nothing_fits():
    with pytest.raises(WorkloadError, match="not even a batch of 1"):
        bs.search_by_trial(Device(0).fits, 64)


def test_processes_agree_on_the_smallest_device():
    mine, other = Device(300), Device(100)

    def run_step(n):
        other.fits(n)
        return mine.fits(n)

    record = bs.find(run_step, on_gpu=True, start=64,
                     gather=lambda ok: [ok, other.tried[-1] <= other.limit])
    assert record["found"] == 96 and record["method"] == "trial"
    assert [p["batch_size"] for p in record["probes"]] == mine.tried
    assert all(p["fits"] == (p["batch_size"] <= 100) for p in record["probes"])


# ---- batch search: memory model (CPUs) -----------------------------------------------


def linear_memory(fixed, per_image):
    return lambda n: fixed + per_image * n


def test_memory_model_takes_the_largest_batch_within_budget():
    model = bs.search_by_memory_model(linear_memory(1 * GIB, 100 * MIB), budget_bytes=3 * GIB)
    assert model["per_image_bytes"] == 100 * MIB and model["fixed_bytes"] == 1 * GIB
    assert model["predicted_max"] == 20 and model["found"] == 16  # rounded down to 8s


def test_memory_model_is_capped_on_cpus():
    assert bs.search_by_memory_model(linear_memory(GIB, MIB), 8 * GIB)["found"] == bs.CPU_MAX_BATCH


def test_memory_model_with_no_measured_growth_is_unusable_not_the_maximum():
    # The allocator served every probe from memory already resident: slope 0.
    model = bs.search_by_memory_model(linear_memory(GIB, 0), 8 * GIB)
    assert model["usable"] is False and "found" not in model
    assert model["passes"] == bs.PASSES and "0 bytes" in model["reason"]


def test_memory_model_retries_a_pass_that_measured_nothing():
    calls = []

    def peaks(n):  # first pass (after warm-up) flat, second pass linear
        calls.append(n)
        return GIB + (0 if len(calls) <= 1 + len(bs.PROBE_SIZES) else 100 * MIB * n)

    model = bs.search_by_memory_model(peaks, 3 * GIB)
    assert model["usable"] and model["passes"] == 2
    assert model["per_image_bytes"] == pytest.approx(100 * MIB)


def test_cpu_search_falls_back_to_the_presets_batch_and_says_why(monkeypatch):
    monkeypatch.setattr(bs, "peak_rss_bytes", lambda: 5 * GIB)  # never moves
    record = bs.find(lambda n: True, on_gpu=False, start=32)
    assert record["found"] == 32 and record["method"] == "fallback"  # not CPU_MAX_BATCH
    assert record["usable"] is False and "per-image memory" in record["reason"]
    assert record["rule"] == bs.UNUSABLE_RULE


def test_memory_model_refuses_when_one_image_is_over_budget():
    with pytest.raises(WorkloadError, match="over this process's budget") as err:
        bs.search_by_memory_model(linear_memory(4 * GIB, 100 * MIB), budget_bytes=3 * GIB)
    assert "--batch-size" in err.value.one_line()


def test_cpu_search_measures_real_peak_memory():
    """run_step touches 32 MiB per image; the kernel's peak-RSS mark sees it."""
    def run_step(n):
        block = b"\x01" * (32 * MIB * n)  # written, so resident
        return len(block) > 0

    record = bs.find(run_step, on_gpu=False, start=4)
    assert record["method"] == "memory-model" and len(record["probes"]) in (4, 7)  # 1 or 2 passes
    assert record["per_image_bytes"] == pytest.approx(32 * MIB, rel=0.25)
    assert record["found"] == min(bs.CPU_MAX_BATCH, record["predicted_max"] // 8 * 8)


def test_peak_rss_can_be_reset():
    assert bs.reset_peak_rss()
    block = b"\x01" * (64 * MIB)
    high = bs.peak_rss_bytes()
    del block
    assert bs.reset_peak_rss()
    assert bs.peak_rss_bytes() <= high - 48 * MIB


# ---- batch search on a real PyTorch trainer -------------------------------------------


def cpu_context():
    import torch

    from hpcai.workloads.distributed import Context

    return Context(0, 1, 0, 1, "cpu", torch.device("cpu"), None, 2, socket.gethostname())


def test_torch_probes_free_memory_and_change_no_weight():
    """The real ResNet-50 trainer; only the device's memory limit is a stand-in
    (a CPU has none): steps over 8 images raise PyTorch's own OutOfMemoryError."""
    import torch

    from hpcai.workloads.resnet50 import ResNet50

    class ResNet50WithStandInMemoryLimit(ResNet50):
        def step(self):
            if self.batch_size > 8:
                raise torch.OutOfMemoryError("stand-in: CUDA out of memory")
            return super().step()

    spec = {"workload": "resnet50", "preset": "tiny", "seed": 0,
            "params": {"batch_size": "auto", "image_size": 32, "num_classes": 10,
                       "precision": "fp32"}}
    ctx = cpu_context()
    trainer = ResNet50WithStandInMemoryLimit.__new__(ResNet50WithStandInMemoryLimit)
    # Build it with a fixed batch first, to compare weights before and after a search.
    ResNet50.__init__(trainer, {**spec, "params": {**spec["params"], "batch_size": 4}}, ctx)
    before = [p.detach().clone() for p in trainer.module.parameters()]
    trainer._set_lr(0.0)
    record = bs.find(bs.torch_step_runner(trainer, ctx), on_gpu=True, start=4)
    assert record["found"] == 8
    assert [(p["batch_size"], p["fits"]) for p in record["probes"]] == [
        (4, True), (8, True), (16, False)]
    assert trainer.images is None and len(trainer.optimizer.state) == 0  # freed after the OOM
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.module.parameters()))


def test_torch_out_of_memory_errors_are_recognised():
    import torch

    assert bs.is_torch_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert bs.is_torch_oom(RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"))
    assert bs.is_torch_oom(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert not bs.is_torch_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
