"""The seed paper's devices, from its own Table 2 (hpcai/reference/
seed-paper-devices.csv: model, memory size, bandwidth as printed), matched to
the device table by family, memory and bandwidth: the paper's "H100" is the
94 GB HBM2e part at 2.4 TB/s (NHR@FAU's Helma), not the 80 GB HBM3 SXM part."""
from __future__ import annotations

import csv
import io
from functools import lru_cache
from importlib import resources

from hpcai import devices

TABLE2 = "seed-paper-devices.csv"


@lru_cache(maxsize=1)
def table2() -> tuple[dict, ...]:
    text = resources.files("hpcai.reference").joinpath(TABLE2).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return tuple(csv.DictReader(io.StringIO("\n".join(lines))))


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


@lru_cache(maxsize=None)
def device(name: str) -> devices.Device | None:
    """The device table's entry for a device as the paper names it ("H100"),
    per its Table 2; None for a device Table 2 does not list or the table lacks."""
    row = next((r for r in table2() if r["device"] == name), None)
    if row is None:
        return None
    memory, bandwidth = _number(row["memory_gb"]), _number(row["memory_bandwidth_tb_s"])
    if memory is None:
        return None
    return devices.by_family(name, memory, bandwidth)


def describe() -> str:
    """"H100 = H100 SXM5 94GB HBM2e (94 GB, 2.4 TB/s), ..." for the report's notes."""
    parts = []
    for row in table2():
        found = device(row["device"])
        parts.append(f"{row['device']} = {found.model if found else 'not in the device table'} "
                     f"({row['memory_gb']} GB {row['memory_interface']}, "
                     f"{row['memory_bandwidth_tb_s']} TB/s)")
    return ", ".join(parts)
