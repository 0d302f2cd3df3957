"""Bundles as OCI artifacts through the ORAS Python client (oras-py): the packed
bundle is one layer with hpcai's own media type, and a small config names the
site and runs, so a registry lists what it holds without unpacking it."""
from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.launcher.bundles.bundle import ENVELOPE_FILE, pack, unpack
from hpcai.launcher.bundles.files import read_regular
from hpcai.install import install_hint

SCHEME = "oras://"
ARTIFACT_TYPE = "application/vnd.hpcai.result-bundle.v1"
LAYER_MEDIA_TYPE = "application/vnd.hpcai.result-bundle.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.hpcai.result-bundle.config.v1+json"
LAYER_NAME = "bundle.tar"


def is_reference(text: str) -> bool:
    return str(text).startswith(SCHEME)


def _target(ref: str) -> str:
    if not is_reference(ref):
        raise UsageError(f"{ref} is not a registry reference", "write oras://REGISTRY/NAMESPACE/REPO:TAG")
    target = ref[len(SCHEME):]
    name = target.rsplit("/", 1)[-1]
    if "/" not in target or not name or name.startswith(":"):
        raise UsageError(f"{ref} names no repository", "write oras://REGISTRY/NAMESPACE/REPO:TAG")
    return target


def _client(https: bool):
    try:
        import oras.client
    except ImportError:
        raise UsageError("the ORAS Python client (`oras`) is not installed",
                         install_hint('results')) from None
    return oras.client.OrasClient(insecure=not https)


def _packed(bundle: Path) -> bytes:
    if bundle.is_dir() and not bundle.is_symlink():
        if not (bundle / ENVELOPE_FILE).is_file():
            raise UsageError(f"{bundle} is not a bundle (no {ENVELOPE_FILE})",
                             "make one with `hpcai-launch results bundle RUN... -o DIR`")
        return pack(bundle)
    return read_regular(bundle, "packed bundle")


def push(bundle: str, ref: str, https: bool, site: str | None, runs: list[str]) -> str:
    """Push a bundle folder (packed here) or a .tar from `bundle --tar`; returns the digest."""
    target = _target(ref)
    data = _packed(Path(bundle))
    client = _client(https)
    with tempfile.TemporaryDirectory(prefix="hpcai-bundle-") as tmp:
        layer, config = Path(tmp) / LAYER_NAME, Path(tmp) / "config.json"
        layer.write_bytes(data)
        config.write_text(json.dumps({"site": site, "runs": runs}))
        try:
            client.push(target, files=[f"{layer}:{LAYER_MEDIA_TYPE}"], disable_path_validation=True,
                        manifest_config=f"{config}:{CONFIG_MEDIA_TYPE}",
                        manifest_annotations={"org.hpcai.site": site or "",
                                              "org.hpcai.artifact-type": ARTIFACT_TYPE},
                        quiet=True)
        except Exception as exc:  # requests' and oras' errors alike: one line
            raise UsageError(f"cannot push to {ref}: {' '.join(str(exc).split())[:300]}",
                             "check the registry address and that it is reachable") from None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def pull(ref: str, out: Path, https: bool) -> Path:
    """The bundle at ref, unpacked into the new folder out (its layer's digest checked)."""
    target = _target(ref)
    client = _client(https)
    try:
        manifest = client.get_manifest(target)
    except Exception as exc:
        raise UsageError(f"cannot read {ref}: {' '.join(str(exc).split())[:300]}",
                         "check the reference and that the registry is reachable") from None
    layers = [x for x in manifest.get("layers") or [] if x.get("mediaType") == LAYER_MEDIA_TYPE]
    if len(layers) != 1:
        kinds = ", ".join(sorted({str(x.get("mediaType")) for x in manifest.get("layers") or []}))
        raise UsageError(f"{ref} is not an hpcai result bundle (layers: {kinds or 'none'})",
                         "pull it with the tool that pushed it")
    with tempfile.TemporaryDirectory(prefix="hpcai-bundle-") as tmp:
        blob = Path(tmp) / LAYER_NAME
        try:
            client.download_blob(client.get_container(target), layers[0]["digest"], str(blob))
        except Exception as exc:
            raise UsageError(f"cannot download {ref}: {' '.join(str(exc).split())[:300]}",
                             "check that the registry is reachable") from None
        data = blob.read_bytes()
    if "sha256:" + hashlib.sha256(data).hexdigest() != layers[0]["digest"]:
        raise UsageError(f"{ref}: the downloaded layer does not match its digest",
                         "the registry or the network changed it; do not use it")
    return unpack(data, out)
