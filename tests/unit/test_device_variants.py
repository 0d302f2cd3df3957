"""GPU variants told apart by name and memory size, and the seed paper's
devices taken from its own Table 2 (hpcai/reference/seed-paper-devices.csv)."""
import pytest

from hpcai import devices
from hpcai.devices import paper

MIB = 2**20


@pytest.mark.parametrize("name, memory_mib, model, bandwidth", [
    # The generic driver name: the memory total picks the part.
    ("NVIDIA H100", 81559, "H100 SXM", 3.35),  # 80 GB HBM3 (nvidia-smi: 81559 MiB)
    ("NVIDIA H100", 97871, "H100 SXM5 94GB HBM2e", 2.4),  # 94 GB HBM2e
    ("NVIDIA H100 80GB HBM3", None, "H100 SXM", 3.35),
    ("NVIDIA H100 NVL", 95830, "H100 NVL", 3.9),
    ("NVIDIA H200", 143771, "H200 SXM", 4.8),
    ("NVIDIA H200 NVL", 143771, "H200 NVL", 4.8),
    ("NVIDIA GH200 480GB", 97871, "GH200", 4.0),
    ("NVIDIA GH200 144G HBM3e", 146831, "GH200 144GB HBM3e", 4.9),
    ("AMD Instinct MI300X", 196592, "MI300X", 5.3),
])
def test_variants_by_name_and_memory(name, memory_mib, model, bandwidth):
    found = devices.lookup(name, memory_mib * MIB if memory_mib else None)
    assert found.model == model and found.bandwidth_tbs == bandwidth


def test_a_shared_name_without_memory_is_the_first_listed_and_far_memory_does_not_guess():
    assert devices.lookup("NVIDIA H100").model == "H100 SXM"
    # 40 GB is neither 80 nor 94 GB: the default entry, not the nearest by accident.
    assert devices.lookup("NVIDIA H100", 40 * 10**9).model == "H100 SXM"


def test_the_papers_devices_are_its_table_2_parts():
    h100 = paper.device("H100")
    assert (h100.model, h100.memory_gb, h100.bandwidth_tbs) == ("H100 SXM5 94GB HBM2e", 94, 2.4)
    assert paper.device("H200").model == "H200 SXM"
    assert paper.device("MI300X").model == "MI300X"
    assert paper.device("B300") is None
    assert "H100 = H100 SXM5 94GB HBM2e (94 GB HBM2e, 2.4 TB/s)" in paper.describe()
