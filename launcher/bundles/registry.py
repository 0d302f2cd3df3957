"""Bundles as OCI artifacts through the ORAS Python client (oras-py): the packed
bundle is one layer with hpcai's own media type, and a small config names the
site and runs, so a registry lists what it holds without unpacking it."""
from __future__ import annotations

import functools
import hashlib
import json
import re
import tempfile
import types
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.printable import is_printable, printable
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


# The OCI distribution reference grammar (github.com/distribution/reference,
# reference.go), with the registry host required: a name without one would go
# to the client's default public registry, which the user never named.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]{{1,5}})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"(?P<host>{_HOST})/(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
                        r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?")
FORM = "write oras://REGISTRY[:PORT]/NAMESPACE/REPO:TAG (credentials go in `oras login`, never in the reference)"
# One request may take this long (connect, read), and is never retried: an
# unreachable registry fails in one line instead of two minutes of retries.
TIMEOUT_S = (10.0, 60.0)


def shown(ref: str) -> str:
    """ref as it may be printed: anything up to a user:password@ dropped (an @ not of a
    digest), control characters escaped."""
    text = str(ref)
    scheme = SCHEME if text.startswith(SCHEME) else ""
    body = text[len(scheme):]
    ats = [i for i, c in enumerate(body) if c == "@" and not body.startswith("sha256:", i + 1)]
    if ats:
        body = "***" + body[ats[-1]:]
    return printable(scheme + body)


def _target(ref: str) -> str:
    """The reference without its scheme, checked; a UsageError naming it safely if not."""
    if not is_reference(ref):
        raise UsageError(f"{shown(ref)} is not a registry reference", FORM)
    target = ref[len(SCHEME):]
    host = target.split("/", 1)[0]
    if shown(ref) != printable(ref):
        raise UsageError(f"{shown(ref)} holds credentials (user:password@): they are never sent nor printed",
                         "remove them; log in with `oras login REGISTRY` (or a site's credential helper)")
    if not is_printable(target) or not target.isascii():
        raise UsageError(f"{shown(ref)} holds a control or non-ASCII character", FORM)
    match = _REFERENCE.fullmatch(target)
    if match is None:
        raise UsageError(f"{shown(ref)} is not a valid OCI reference", FORM)
    if "." not in host and ":" not in host and host != "localhost":
        raise UsageError(f"{shown(ref)} names no registry host ({host!r} would be read as a namespace "
                         "on the client's default public registry)", FORM)
    return target


def _client(https: bool):
    try:
        import oras.client
    except ImportError:
        raise UsageError("the ORAS Python client (`oras`) is not installed",
                         install_hint('results')) from None
    client = oras.client.OrasClient(insecure=not https)
    # oras-py retries every request 5 times with sleeps of 3..83 s (oras/decorator.py
    # retry): call the undecorated request, each with a timeout.
    unretried = getattr(type(client).do_request, "__wrapped__", None)
    if unretried is not None:
        client.do_request = types.MethodType(unretried, client)
    client.session.request = functools.partial(client.session.request, timeout=TIMEOUT_S)
    return client


def _failed(what: str, ref: str, exc: Exception) -> str:
    """One line for a client error: never the credentials a message may quote."""
    return f"{what} {shown(ref)}: {printable(' '.join(str(exc).split()))[:300]}"


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
            raise UsageError(_failed("cannot push to", ref, exc),
                             "check the registry address and that it is reachable") from None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def pull(ref: str, out: Path, https: bool) -> Path:
    """The bundle at ref, unpacked into the new folder out (its layer's digest checked)."""
    target = _target(ref)
    client = _client(https)
    try:
        manifest = client.get_manifest(target)
    except Exception as exc:
        raise UsageError(_failed("cannot read", ref, exc),
                         "check the reference and that the registry is reachable") from None
    layers = [x for x in manifest.get("layers") or [] if x.get("mediaType") == LAYER_MEDIA_TYPE]
    if len(layers) != 1:
        kinds = ", ".join(sorted({str(x.get("mediaType")) for x in manifest.get("layers") or []}))
        raise UsageError(f"{shown(ref)} is not an hpcai result bundle (layers: {kinds or 'none'})",
                         "pull it with the tool that pushed it")
    with tempfile.TemporaryDirectory(prefix="hpcai-bundle-") as tmp:
        blob = Path(tmp) / LAYER_NAME
        try:
            client.download_blob(client.get_container(target), layers[0]["digest"], str(blob))
        except Exception as exc:
            raise UsageError(_failed("cannot download", ref, exc),
                             "check that the registry is reachable") from None
        data = blob.read_bytes()
    if "sha256:" + hashlib.sha256(data).hexdigest() != layers[0]["digest"]:
        raise UsageError(f"{shown(ref)}: the downloaded layer does not match its digest",
                         "the registry or the network changed it; do not use it")
    return unpack(data, out)
