"""GPU management libraries behind one interface (see base.py).

Vendor libraries are imported only inside these functions, so importing
hpcai.gpu needs neither pynvml nor amdsmi (nor torch).
"""
from __future__ import annotations

from hpcai.errors import DeviceError, UsageError
from hpcai.gpu.base import GpuDevice, GpuInfo, GpuLibrary, GpuReading, PowerLimits

VENDORS = ("nvidia", "amd")

__all__ = [
    "GpuDevice",
    "GpuInfo",
    "GpuLibrary",
    "GpuReading",
    "PowerLimits",
    "VENDORS",
    "detect_vendor",
    "open_library",
]


def _open(vendor: str) -> GpuLibrary:
    """Open one vendor's library; DeviceError when it is missing or fails."""
    if vendor == "nvidia":
        from hpcai.gpu.nvidia import NvidiaLibrary

        return NvidiaLibrary()
    from hpcai.gpu.amd import AmdLibrary

    return AmdLibrary()


def open_library(vendor: str = "auto") -> GpuLibrary | None:
    """The management library for vendor "nvidia", "amd" or "auto".

    "auto" tries NVIDIA, then AMD, and returns None when neither imports,
    initialises and sees a GPU. A named vendor raises DeviceError instead.
    The caller closes the library (it is a context manager).
    """
    if vendor not in (*VENDORS, "auto"):
        raise UsageError(f"unknown GPU vendor {vendor!r}", "use nvidia, amd or auto")
    for candidate in VENDORS if vendor == "auto" else (vendor,):
        try:
            library = _open(candidate)
        except DeviceError:
            if vendor == "auto":
                continue
            raise
        try:
            if library.devices():
                return library
        except DeviceError:
            library.close()
            if vendor == "auto":
                continue
            raise
        library.close()
        if vendor != "auto":
            raise DeviceError(
                f"the {candidate} management library sees no GPU",
                "run on a GPU node, or check the job's GPU allocation",
            )
    return None


def detect_vendor() -> str | None:
    """ "nvidia", "amd", or None when no management library sees a GPU."""
    library = open_library("auto")
    if library is None:
        return None
    try:
        return library.vendor
    finally:
        library.close()
