"""This host's CPU: cores, threads, clocks and caches from lscpu and
/proc/cpuinfo, and a peak FLOP/s ESTIMATE from its vector width (no datasheet
lookup: CPU models are too many to tabulate).

Estimate: physical cores x max clock x FLOPs per cycle per core, where a core
is assumed to have two FMA units (most server x86 cores since Haswell; some
have one, so it may be 2x high) of the widest vector ISA its flags show; an
FMA is 2 FLOPs."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# Lanes of fp64 per vector register, by the widest ISA present in the flags.
_VECTOR_FP64_LANES = (("avx512f", 8, "AVX-512"), ("avx2", 4, "AVX2"), ("avx", 4, "AVX"), ("sse2", 2, "SSE2"))
FMA_UNITS_ASSUMED = 2


def parse_lscpu(text: str) -> dict:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def parse_cpuinfo(text: str) -> dict:
    first = text.split("\n\n", 1)[0]
    return parse_lscpu(first)


def describe(lscpu_text: str, cpuinfo_text: str) -> dict:
    """The CPU's figures, with the peak estimate labelled as one."""
    ls, info = parse_lscpu(lscpu_text), parse_cpuinfo(cpuinfo_text)
    flags = set((ls.get("Flags") or info.get("flags") or "").split())
    sockets = int(ls.get("Socket(s)", 1) or 1)
    cores_per_socket = int(ls.get("Core(s) per socket", 0) or 0) or int(info.get("cpu cores", 0) or 0)
    cores = cores_per_socket * sockets or None
    threads = int(ls.get("CPU(s)", 0) or 0) or None
    mhz = _float(ls.get("CPU max MHz")) or _float(info.get("cpu MHz"))
    width = next(((lanes, isa) for flag, lanes, isa in _VECTOR_FP64_LANES if flag in flags), (None, None))
    entry = {
        "model": info.get("model name") or ls.get("Model name"),
        "vendor": ls.get("Vendor ID") or info.get("vendor_id"),
        "cores": cores, "threads": threads, "clock_mhz": mhz,
        "caches": {k: v for k, v in ls.items() if k.endswith(" cache")},
        "vector_isa": width[1],
        "peak_tflops_estimate": None,
        "estimate_method": None,
    }
    fma = "fma" in flags or "avx512f" in flags
    if cores and mhz and width[0] and fma:
        fp64_per_cycle = FMA_UNITS_ASSUMED * width[0] * 2
        fp64 = cores * mhz * 1e6 * fp64_per_cycle / 1e12
        entry["peak_tflops_estimate"] = {"fp64": fp64, "fp32": 2 * fp64}
        entry["estimate_method"] = (
            f"estimate: {cores} cores x {mhz:.0f} MHz x {FMA_UNITS_ASSUMED} FMA units x {width[0]} fp64 lanes "
            f"({width[1]}) x 2 FLOPs per FMA; fp32 twice that; not a datasheet figure")
    return entry


def this_host() -> dict:
    lscpu = ""
    if shutil.which("lscpu"):
        try:
            lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                                   env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}).stdout
        except (OSError, subprocess.SubprocessError):
            lscpu = ""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    return describe(lscpu, cpuinfo)


def _float(value) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None
