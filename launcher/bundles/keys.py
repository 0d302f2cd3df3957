"""Ed25519 signing keys for result bundles, through the `cryptography` library.

Why Ed25519 and not the site's PGP image key: signing and verifying need no
gpg, keyring or network (`cryptography` ships wheels with OpenSSL inside); a
key is one small PEM file a site can hand to another; signatures are
deterministic (RFC 8032), so there is no nonce for a bad random source to
leak the key through (ECDSA's trap); and DSSE, the envelope in-toto uses,
expects raw signatures over bytes, not OpenPGP packets.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.ownership import OTHERS_ANY, chain_problem, owner_ok, stat_problem
from hpcai.launcher.bundles.files import read_regular, write_new
from hpcai.install import install_hint

MISSING = ("the `cryptography` library is not installed",
           f"{install_hint('results')} (signed result bundles need it)")


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise UsageError(*MISSING) from None
    return serialization, ed25519


def public_path(private: Path | str) -> Path:
    return Path(f"{private}.pub")


def generate(private: Path | str) -> tuple[Path, Path, str]:
    """A new key pair: PRIVATE (PEM, mode 0600) and PRIVATE.pub. Neither file may exist."""
    serialization, ed25519 = _crypto()
    private, public = Path(private), public_path(private)
    for path in (private, public):
        if path.exists() or path.is_symlink():
            raise UsageError(f"{path} already exists: keygen never overwrites a key",
                             "choose another path, or move the old key away")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    write_new(private, pem, 0o600)
    try:
        write_new(public, pub, 0o644)
    except UsageError:
        private.unlink()  # raced: leave no half pair behind
        raise
    return private, public, key_id(key.public_key())


def key_id(public) -> str:
    """The SHA-256 of the raw 32-byte public key, hex: what an envelope names its signer by."""
    serialization, _ = _crypto()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _private_to_us(path: Path, st: os.stat_result) -> None:
    """A signing key others can read signs for anyone who copied it (ssh's rule: 0600)."""
    why = stat_problem(st, f"signing key {path}", forbidden=OTHERS_ANY)
    if why is None:
        return
    if not owner_ok(st.st_uid):
        raise UsageError(why, "sign with a key of your own (`hpcai-launch results keygen PATH`)")
    raise UsageError(why, f"chmod 600 {path}, and make a new key if others may have copied it")


def _trusted_file(path: Path, st: os.stat_result) -> None:
    """A trusted public key another user can replace lets them sign as any site:
    the trust rule (hpcai/ownership.py) for the file and the folder holding it."""
    why = stat_problem(st, f"public key {path}")
    if why:
        raise UsageError(why, f"keep trusted keys in files only you (or root) can write: chown and chmod go-w {path}")
    why = chain_problem(path.parent, count=1)
    if why:
        raise UsageError(f"the folder holding public key {path}: {why}",
                         f"keep trusted keys in a folder only you (or root) can write (chmod go-w {path.parent})")


def load_private(path: Path | str):
    serialization, ed25519 = _crypto()
    data = read_regular(path, "signing key", _private_to_us)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path} is not an unencrypted PEM private key ({exc})",
                         "make one with `hpcai-launch results keygen PATH`") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UsageError(f"{path} is not an Ed25519 key", "make one with `hpcai-launch results keygen PATH`")
    return key


def load_public(path: Path | str, trusted: bool = False):
    """trusted: a key a site trusts, so its file must be one no one else could have written."""
    serialization, ed25519 = _crypto()
    data = read_regular(path, "public key", _trusted_file if trusted else None)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path} is not a PEM public key ({exc})",
                         "give the PRIVATE.pub file `results keygen` wrote") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise UsageError(f"{path} is not an Ed25519 public key",
                         "give the PRIVATE.pub file `results keygen` wrote")
    return key
