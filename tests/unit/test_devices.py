"""The device table (hpcai/devices): figures checked against a second source
named beside each, exact name matching, and the CPU's labelled estimate."""
import pytest

from hpcai import devices
from hpcai.devices import cpu

# Each figure from a source other than the datasheet the table cites.
SECOND_SOURCE = [
    # NVIDIA Hopper architecture whitepaper (WP-10792), table "NVIDIA H100 SXM5": 132 SMs,
    # peak BF16 Tensor TFLOPS with FP32 accumulate 989.4 (dense).
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4, 132),
    # NVIDIA A100 whitepaper: 108 SMs x 1410 MHz x 1024 dense FP16 FMA/SM/clock x 2 = 311.9 TFLOP/s.
    ("NVIDIA A100-SXM4-40GB", "bf16", 108 * 1410e6 * 1024 * 2 / 1e12, 108),
    # AMD CDNA 3 architecture whitepaper: 304 CUs x 2100 MHz x 2048 dense FP16 FLOPs/CU/clock.
    ("AMD Instinct MI300X", "fp16", 304 * 2100e6 * 2048 / 1e12, 304),
    # AMD CDNA 2 whitepaper: MI250X 220 CUs x 1700 MHz x 1024 FP16 FLOPs/CU/clock, two GCDs.
    ("AMD Instinct MI250X", "bf16", 220 * 1700e6 * 1024 / 1e12 / 2, 110),
    # glennklockwood.com/garden/processors/B200: HGX B200 at 1000 W, BF16 dense 2250.
    ("NVIDIA B200", "bf16", 2250.0, None),
]


@pytest.mark.parametrize("name,precision,tflops,units", SECOND_SOURCE)
def test_peaks_agree_with_a_second_source(name, precision, tflops, units):
    entry = devices.lookup(name)
    assert entry.tflops[precision] == pytest.approx(tflops, rel=0.002)
    if units is not None:
        assert entry.sm_count == units


@pytest.mark.parametrize("name,bandwidth,memory", [
    ("NVIDIA H100 80GB HBM3", 3.35, 80),  # Hopper whitepaper, H100 SXM5: 3.35 TB/s HBM3 (final spec)
    ("NVIDIA H200", 4.8, 141),  # Lenovo ThinkSystem NVIDIA H200 product guide: 141 GB HBM3e, 4.8 TB/s
    ("AMD Instinct MI300X", 5.3, 192),  # AMD CDNA 3 whitepaper: 192 GB HBM3, 5.3 TB/s
    ("AMD Instinct MI325X", 6.0, 256),  # AMD ROCm docs, GPU hardware specifications: 256 GB, 6 TB/s
    ("NVIDIA A100-SXM4-80GB", 2.039, 80),  # NVIDIA A100 80GB whitepaper addendum: 2,039 GB/s
])
def test_memory_agrees_with_a_second_source(name, bandwidth, memory):
    entry = devices.lookup(name)
    assert entry.bandwidth_tbs == pytest.approx(bandwidth, rel=0.01) and entry.memory_gb == memory


@pytest.mark.parametrize("name", ["NVIDIA RTX A1000", "NVIDIA A100X", "NVIDIA GH200 480GB extra",
                                  "H100", "NVIDIA H20", "", None])
def test_matching_is_exact_never_a_substring(name):
    assert devices.lookup(name) is None


@pytest.mark.parametrize("name,model", [
    ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"), ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("  nvidia  h100 pcie ", "H100 PCIe"), ("AMD Instinct MI325X", "MI325X"),
])
def test_reported_names_find_their_model(name, model):
    assert devices.lookup(name).model == model


def test_every_entry_is_complete_and_names_its_source():
    models = {d.model for d in devices.gpus()}
    assert {"H100 SXM", "H100 PCIe", "H100 NVL", "H200 SXM", "GH200", "B200", "A100 SXM4 40GB",
            "A100 PCIe 80GB", "MI250X (one GCD)", "MI300X", "MI325X"} <= models
    for d in devices.gpus():
        assert d.url.startswith("https://") and d.source
        assert d.bandwidth_tbs and d.memory_gb and d.tdp_w and d.sm_count and d.interconnect
        assert set(d.tflops) <= set(devices.PRECISIONS) and d.tflops["bf16"] > d.tflops["fp32"]


def test_balance_point_is_peak_over_bandwidth():
    h100 = devices.lookup("NVIDIA H100 80GB HBM3")
    assert h100.balance("bf16") == pytest.approx(989.5 / 3.35)
    assert devices.lookup("AMD Instinct MI250X").balance("tf32") is None


LSCPU = """Architecture:            x86_64
CPU(s):                  128
Model name:              Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz
Thread(s) per core:      2
Core(s) per socket:      32
Socket(s):               2
CPU max MHz:             3400.0000
L2 cache:                80 MiB (64 instances)
L3 cache:                96 MiB (2 instances)
Flags:                   fpu sse2 avx fma avx2 avx512f avx512dq
"""


def test_cpu_figures_and_a_labelled_estimate():
    entry = cpu.describe(LSCPU, "")
    assert entry["cores"] == 64 and entry["threads"] == 128 and entry["clock_mhz"] == 3400.0
    assert entry["caches"]["L3 cache"] == "96 MiB (2 instances)" and entry["vector_isa"] == "AVX-512"
    # 64 cores x 3.4 GHz x 2 FMA units x 8 fp64 lanes x 2 FLOPs
    assert entry["peak_tflops_estimate"]["fp64"] == pytest.approx(64 * 3.4e9 * 32 / 1e12)
    assert entry["estimate_method"].startswith("estimate:")


def test_cpu_without_fma_has_no_estimate():
    entry = cpu.describe(LSCPU.replace("avx fma avx2 avx512f avx512dq", "sse2"), "")
    assert entry["peak_tflops_estimate"] is None and entry["cores"] == 64


def test_a_cpu_run_carries_the_estimate_beside_no_datasheet_peak():
    from hpcai.provenance import cpu_model
    from hpcai.workloads import flops

    peak = flops.peak_for(cpu_model(), "fp32", 1)
    assert peak["tflops_node"] is None and "no known peak" in peak["reason"]
    if cpu.this_host()["peak_tflops_estimate"]:
        assert peak["cpu_estimate"]["estimate_method"].startswith("estimate:")
