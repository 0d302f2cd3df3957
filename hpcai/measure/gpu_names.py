"""GPU names, matched one way: a model key (a preset's "H100", the reference
table's "MI300X", the device table's "NVIDIA H100 80GB HBM3") names a GPU when
it is the GPU's reported name or a whole word run of it, case and spacing
aside. "H100" names "NVIDIA H100 80GB HBM3" and "NVIDIA H100-SXM5-80GB", but
not "NVIDIA GH100" or "NVIDIA H1000"; "A10" does not name "NVIDIA A100".
"""
from __future__ import annotations

import re

# Model names as the vendors' libraries report them, for short labels.
KNOWN_MODELS = ("GH200", "GB200", "B200", "B100", "H200", "H100", "H800", "A100", "A800", "A40",
                "A30", "A10G", "A10", "L40S", "L40", "L4", "V100", "MI355X", "MI325X", "MI300X",
                "MI300A", "MI250X", "MI250", "MI210", "MI100")
_VENDOR_WORDS = {"nvidia", "amd", "instinct", "tesla", "geforce", "radeon", "pro"}


def normalize(name: str | None) -> str:
    """Case and runs of spaces aside: "  nvidia  h100 pcie " == "NVIDIA H100 PCIe"."""
    return " ".join((name or "").split()).casefold()


def _words(keys) -> re.Pattern:
    """Any of keys, as a whole word run (no letter or digit either side); longer
    keys first, so "MI250X" wins over "MI250" at one place."""
    alternatives = "|".join(re.escape(normalize(k)) for k in sorted(keys, key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9])(?:{alternatives})(?![a-z0-9])")


def matches(model_key: str | None, gpu_name: str | None) -> bool:
    """Does model_key name the GPU reported as gpu_name?"""
    key, name = normalize(model_key), normalize(gpu_name)
    if not key or not name:
        return False
    return _words([key]).search(name) is not None


_KNOWN = _words(KNOWN_MODELS)


def short_name(full: str | None) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100", "AMD Instinct MI300X" -> "MI300X": the
    first known model it names, else its first word beside the vendor's."""
    found = _KNOWN.search(normalize(full))
    if found:
        return found.group(0).upper()
    words = [w for w in (full or "").split() if w.lower() not in _VENDOR_WORDS]
    if not words:
        return full or "GPU"
    first = words[0].split("-")[0]
    if not any(ch.isdigit() for ch in first) and len(words) > 1:
        return f"{first} {words[1]}"
    return first
