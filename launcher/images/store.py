"""Where images live and what they are called.

One image per (flavour, family): `hpcai-<flavour>-<family>.sif` in the
images folder, `<registry>/hpcai-<flavour>-<family>:<tag>` in a registry.
The flavour follows the node's GPU vendor: CUDA for NVIDIA, ROCm for AMD,
the CPU flavour where there is no GPU.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import hpcai
from hpcai.errors import UsageError
from hpcai.workloads.catalog import IMAGE_FAMILIES

FLAVOURS = ("cuda", "rocm", "cpu")
_VENDOR_FLAVOUR = {"nvidia": "cuda", "amd": "rocm"}
LABEL_PREFIX = "org.hpcai."


def flavour_for(vendor: str | None) -> str:
    return _VENDOR_FLAVOUR.get(vendor or "", "cpu")


def check_flavour(flavour: str) -> str:
    if flavour not in FLAVOURS:
        raise UsageError(f"unknown image flavour {flavour!r}", f"choose one of: {', '.join(FLAVOURS)}")
    return flavour


def check_family(family: str) -> str:
    if family not in IMAGE_FAMILIES:
        raise UsageError(f"unknown image family {family!r}",
                         f"choose one of: {', '.join(IMAGE_FAMILIES)}")
    return family


def image_name(flavour: str, family: str) -> str:
    return f"hpcai-{flavour}-{family}"


def images_dir(site: dict) -> Path:
    """$HPCAI_IMAGES_DIR, else the site's [images] dir, else ./images."""
    folder = os.environ.get("HPCAI_IMAGES_DIR") or site.get("images", {}).get("dir") or "images"
    return Path(folder).expanduser().absolute()


def image_path(site: dict, flavour: str, family: str) -> Path:
    return images_dir(site) / f"{image_name(flavour, family)}.sif"


def default_tag() -> str:
    return hpcai.__version__


def registry_uri(site: dict, flavour: str, family: str, tag: str | None = None) -> str | None:
    registry = (site.get("images", {}).get("registry") or "").rstrip("/")
    if not registry:
        return None
    return f"{registry}/{image_name(flavour, family)}:{tag or default_tag()}"


def sha256(path: Path) -> str:
    """The file's sha256, cached beside it while its size and mtime stay the same."""
    path = Path(path)
    stat = path.stat()
    cache = path.with_name(f".{path.name}.sha256.json")
    key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        cached = json.loads(cache.read_text())
        if {k: cached.get(k) for k in key} == key:
            return cached["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    value = digest.hexdigest()
    try:
        cache.write_text(json.dumps({**key, "sha256": value}))
    except OSError:
        pass  # a read-only images folder: hash again next time
    return value


def hpcai_labels(labels: dict[str, str]) -> dict[str, str]:
    """Our labels without their prefix: version, commit, flavour, family, ..."""
    return {k[len(LABEL_PREFIX):]: v for k, v in labels.items() if k.startswith(LABEL_PREFIX)}


def describe(path: Path, labels: dict[str, str]) -> dict:
    """What a result records of its image."""
    ours = hpcai_labels(labels)
    return {"path": str(path), "sha256": sha256(path), "labels": labels,
            "flavour": ours.get("flavour"), "family": ours.get("family")}


def pull_verified(apptainer, site: dict, uri: str, path: Path, log=lambda message: None) -> Path:
    """Pull into the images folder; with the site's verify_key, an image that does
    not verify is deleted, so no later run finds it."""
    apptainer.pull(uri, path, https=site["images"].get("registry_https", True))
    key = site["images"].get("verify_key")
    if key:
        try:
            apptainer.verify(path, Path(key))
        except Exception:
            path.unlink(missing_ok=True)
            raise
        log(f"{path.name} verified against {key}")
    return path
