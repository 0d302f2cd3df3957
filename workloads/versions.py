"""Framework and library versions, read from the installed distributions (no
framework is imported for it). The entrypoint records them in the result; the
image self-check prints them.
"""
from __future__ import annotations

import sys


# Distributions that provide a framework's module, for its version without importing it.
_DISTRIBUTIONS = {"tensorflow": ("tensorflow", "tensorflow-cpu"), "sglang": ("sglang",),
                  "litgpt": ("litgpt",)}


def distribution_version(module: str) -> str | None:
    from importlib import metadata

    for dist in _DISTRIBUTIONS.get(module, (module,)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


# Libraries whose versions shape the figures, recorded when installed.
_LIBRARIES = ("torch", "torchvision", "diffusers", "transformers", "litgpt", "lightning",
              "tensorflow", "keras", "sglang")


def framework_versions(ctx, framework: str) -> dict:
    versions = {
        "framework": "pytorch" if framework == "torch" else framework,
        "framework_version": distribution_version(framework),
        "libraries": {name: v for name in _LIBRARIES if (v := distribution_version(name))},
    }
    # Only a process that already runs PyTorch reports its CUDA/ROCm build. The
    # index's CPU wheels carry CUDA too: "cuda"/"rocm" name the GPU runtime this run
    # used (none on a CPU run); torch_build says what the wheel was built with.
    torch = sys.modules.get("torch")
    versions["gpu_used"] = ctx.device_type == "cuda"
    if torch is not None:
        build = {"cuda": torch.version.cuda, "rocm": getattr(torch.version, "hip", None)}
        gpu = versions["gpu_used"]
        versions.update(cuda=build["cuda"] if gpu else None, rocm=build["rocm"] if gpu else None,
                        cudnn=None, torch_build=build)
        if framework == "torch":
            versions["framework_version"] = torch.__version__
        if ctx.device_type == "cuda" and torch.backends.cudnn.is_available():
            versions["cudnn"] = str(torch.backends.cudnn.version())
    return versions
