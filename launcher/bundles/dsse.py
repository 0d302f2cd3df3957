"""DSSE envelopes (github.com/secure-systems-lab/dsse, protocol.md): the
signature is over PAE(payloadType, payload), never over the JSON around it,
so no re-serialisation can change what was signed."""
from __future__ import annotations

import base64
import binascii
import json

PAYLOAD_TYPE = "application/vnd.in-toto+json"


_URL_SAFE = str.maketrans("-_", "+/")


def b64decode(text: str) -> bytes:
    """DSSE's Base64 (protocol.md: "either standard or URL-safe encoding is allowed"),
    with or without padding; binascii.Error for anything else (or both alphabets mixed)."""
    if ("-" in text or "_" in text) and ("+" in text or "/" in text):
        raise binascii.Error("standard and URL-safe base64 mixed")
    text = text.translate(_URL_SAFE)
    if not text.endswith("="):  # unpadded, as URL-safe encoders often write it
        text += "=" * (-len(text) % 4)
    return base64.b64decode(text, validate=True)


class EnvelopeError(ValueError):
    """The envelope is malformed or its signature does not hold (one line)."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """Pre-Authentication Encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(payload: bytes, private_key, keyid: str, payload_type: str = PAYLOAD_TYPE) -> dict:
    signature = private_key.sign(pae(payload_type, payload))
    return {"payloadType": payload_type,
            "payload": base64.b64encode(payload).decode("ascii"),
            "signatures": [{"keyid": keyid, "sig": base64.b64encode(signature).decode("ascii")}]}


# A statement names each file by its digest and each run in a few KB: 10,000 runs
# fit many times over. Larger is refused before it is read or parsed.
MAX_ENVELOPE_BYTES = 64 << 20


def parse(data: bytes) -> tuple[dict, bytes]:
    """(envelope, payload bytes) of a serialised envelope, or EnvelopeError."""
    if len(data) > MAX_ENVELOPE_BYTES:
        raise EnvelopeError(f"the envelope is larger than {MAX_ENVELOPE_BYTES >> 20} MB: not a statement")
    try:
        env = json.loads(data)
    except RecursionError:
        raise EnvelopeError("the envelope is nested too deep to be a DSSE envelope") from None
    except ValueError as exc:
        raise EnvelopeError(f"the envelope is not JSON ({exc})") from None
    if not isinstance(env, dict) or not isinstance(env.get("payload"), str) \
            or not isinstance(env.get("payloadType"), str) or not isinstance(env.get("signatures"), list):
        raise EnvelopeError("the envelope lacks payload, payloadType or signatures")
    if env["payloadType"] != PAYLOAD_TYPE:
        raise EnvelopeError(f"the envelope's payloadType is {env['payloadType']!r}, not {PAYLOAD_TYPE!r}")
    try:
        payload = b64decode(env["payload"])
    except (binascii.Error, ValueError):
        raise EnvelopeError("the envelope's payload is not base64") from None
    return env, payload


def signature_by(env: dict, payload: bytes, public_key, keyid: str) -> bool:
    """Whether one of the envelope's signatures is public_key's over this payload."""
    from cryptography.exceptions import InvalidSignature

    message = pae(env["payloadType"], payload)
    for entry in env["signatures"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("sig"), str):
            continue
        if entry.get("keyid") not in (None, "", keyid):
            continue
        try:
            public_key.verify(b64decode(entry["sig"]), message)
            return True
        except (InvalidSignature, binascii.Error, ValueError):
            continue
    return False
