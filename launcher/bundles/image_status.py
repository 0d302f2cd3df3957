"""The signature status of the image a run used, for the bundle's predicate.

A run does not write whether its SIF was verified (a site with images.verify_key
refuses an unverified one, but the result keeps only the image's digest), so the
bundle checks it when it is made: the SIF still at the recorded path, with the
recorded SHA-256, verified with the site's images.verify_key through Apptainer.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def _sha256_no_follow(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    finally:
        os.close(fd)


def signature_status(site: dict, image: dict | None) -> str | None:
    """One line: verified, failed (why), or not checked (why). None: no image (host runtime)."""
    if not isinstance(image, dict):
        return None
    key = (site.get("images") or {}).get("verify_key")
    if not key:
        return "not checked: the site names no images.verify_key"
    path = Path(str(image.get("path") or ""))
    seen = _sha256_no_follow(path) if image.get("path") else None
    if seen is None:
        return f"not checked: the image is no longer a plain file at {path}"
    if seen != image.get("sha256"):
        return f"not checked: {path} is no longer the image the run used (another SHA-256)"
    from hpcai.errors import HpcaiError
    from hpcai.launcher.images.apptainer import Apptainer

    try:
        Apptainer(site["apptainer"]["executable"]).verify(path, Path(key))
    except HpcaiError as exc:
        return f"failed: {exc.message}"
    return f"verified with images.verify_key {key} when bundled"
