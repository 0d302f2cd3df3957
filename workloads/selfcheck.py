# SPDX-License-Identifier: Apache-2.0
"""`python -m hpcai.workloads check --family FAMILY`: can this Python run the
family's workloads? Imports every framework and library they need, prints
their versions, and fails with one line naming what is missing.

Images run it as their %test; it needs no GPU (imports only, no device).
"""
from __future__ import annotations

import importlib
import os
import platform
import sys

import hpcai
from hpcai import provenance
from hpcai.workloads import catalog

_FRAMEWORK_LIBRARIES = {"tensorflow": ("keras",)}
# The in-image telemetry library of a GPU flavour (import name).
_GPU_LIBRARY = {"cuda": "pynvml", "rocm": "amdsmi"}
# Frameworks no CPU image carries: SGLang's kernels need a GPU driver (libcuda, ROCm).
_GPU_ONLY = {"sglang"}
# Distributions whose version a module reports when it has no __version__.
_DISTRIBUTION = {"pynvml": "nvidia-ml-py"}


def needed_modules(workloads: list[str], flavour: str | None) -> dict[str, list[str]]:
    """Import name -> the workloads (or `telemetry`) that need it, in a stable order."""
    needs: dict[str, list[str]] = {}
    for name in workloads:
        workload = catalog.get_workload(name)
        for impl_name, impl in workload.impls.items():
            user = name if impl_name == workload.default_impl else f"{name} --impl {impl_name}"
            # What it imports beyond its framework: declared in its Impl.libraries.
            for module in (impl.framework, *_FRAMEWORK_LIBRARIES.get(impl.framework, ()),
                           *impl.libraries):
                needs.setdefault(module, []).append(user)
    if flavour in _GPU_LIBRARY:
        needs.setdefault(_GPU_LIBRARY[flavour], []).append("telemetry")
    return needs


def module_version(module_name: str, module) -> str:
    from hpcai.workloads.versions import distribution_version

    version = getattr(module, "__version__", None)
    return str(version or distribution_version(_DISTRIBUTION.get(module_name, module_name)) or "unknown")


def run(family: str, workloads: list[str] | None = None) -> int:
    if family not in catalog.IMAGE_FAMILIES:
        print(f"hpcai: error: unknown image family {family!r}: choose one of "
              f"{', '.join(catalog.IMAGE_FAMILIES)}", file=sys.stderr)
        return 2
    info = provenance.build_info()
    workloads = workloads or catalog.family_workloads(family)
    strangers = [w for w in workloads if w not in catalog.family_workloads(family)]
    if strangers:
        print(f"hpcai: error: {', '.join(strangers)} not in the {family} family: choose from "
              f"{', '.join(catalog.family_workloads(family))}", file=sys.stderr)
        return 2
    print(f"hpcai {hpcai.__version__} (commit {info.get('commit') or 'unknown'}), "
          f"Python {platform.python_version()}, image {info.get('flavour', '-')}/{info.get('family', '-')}")
    # Keep TensorFlow's C++ start-up lines out of the report.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    missing = []
    for module_name, users in needed_modules(workloads, info.get("flavour")).items():
        if info.get("flavour") == "cpu" and module_name in _GPU_ONLY:
            print(f"  {module_name:<14} not in CPU images (GPU only)")
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a broken install raises more than ImportError
            missing.append(f"{module_name} ({type(exc).__name__}: {exc}; needed by {', '.join(users)})")
            print(f"  {module_name:<14} MISSING")
            continue
        print(f"  {module_name:<14} {module_version(module_name, module)}")
    if missing:
        print(f"hpcai: error: cannot import {'; '.join(missing)}: rebuild the image "
              f"or install the {family} stack", file=sys.stderr)
        return 1
    print(f"ok: {family} family ready for {', '.join(workloads)}")
    return 0
