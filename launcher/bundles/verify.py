"""`results verify BUNDLE`: is this bundle what a trusted site signed, unchanged,
and do its figures hold up when recomputed with this version's thresholds?

A verification proves the signer (a key the site's file trusts) and the bytes
(every file as signed); it cannot prove a number was measured as stated: a
trusted site can sign anything. It says so in its line.

Each failure is one line naming what broke: the signature (an untrusted or
expired key, a statement changed after signing), a site name other than the
key's (a result replayed under another site's name), a file that is missing,
extra or not the one signed (a tampered number, a swapped file), a result
that breaks the schema, or figures that disagree with their own records.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from hpcai.errors import HpcaiError
from hpcai.launcher.bundles import dsse
from hpcai.launcher.bundles.bundle import ENVELOPE_FILE, RUN_FILES
from hpcai.launcher.bundles.files import list_tree, read_regular
from hpcai.launcher.bundles.recompute import TAMPER_CHECKS, recompute
from hpcai.launcher.bundles.statement import PREDICATE_TYPE, STATEMENT_TYPE, sha256

VERIFIED, UNSIGNED, FAILED = "verified", "unsigned", "failed"
# Checks whose failure means the numbers are not what was measured (not merely a bad run).


class VerificationFailed(HpcaiError):
    exit_code = 1


@dataclass
class Verdict:
    status: str  # verified | unsigned | failed
    reason: str  # one line
    site: str | None = None
    keyid: str | None = None
    runs: list[dict] = field(default_factory=list)  # {folder, doc, validity}


class _Fail(Exception):
    pass


def verify_bundle(folder: Path | str, trusted: list, expect_site: str | None = None,
                  today: dt.date | None = None) -> Verdict:
    """The verdict on one bundle folder; never raises for a bad bundle."""
    folder = Path(folder)
    site = keyid = None
    try:
        if not (folder / ENVELOPE_FILE).exists() and not (folder / ENVELOPE_FILE).is_symlink():
            return Verdict(UNSIGNED, f"{folder} holds no {ENVELOPE_FILE}: nothing vouches for it")
        names = list_tree(folder)
        env, payload = _envelope(folder)
        key = _signer(env, payload, trusted)
        keyid = key.keyid
        stmt = _statement(payload)
        site = stmt["predicate"].get("site")
        _check_key(key, site, expect_site, today or dt.date.today())
        _check_files(folder, names, stmt)
        runs = _check_runs(folder, stmt, site)
    except _Fail as exc:
        return Verdict(FAILED, str(exc), site, keyid)
    except HpcaiError as exc:  # a link or unreadable file inside the bundle
        return Verdict(FAILED, exc.message, site, keyid)
    except RecursionError:  # a signed file nested 100,000 deep: json's recursion
        return Verdict(FAILED, "a signed file is nested too deep to be a result or a statement", site, keyid)
    return Verdict(VERIFIED, proven(site, keyid, len(runs)), site, keyid, runs)


def proven(site: str, keyid: str, runs: int) -> str:
    """What a verification proves, no more: who signed and that the bytes are the ones
    signed. A trusted site can sign any number; that its figures agree with its own
    records shows only that they were not edited alone, not that they were measured."""
    return (f"signed by the key site {site!r} gave you (key {keyid[:16]}); the {runs} run(s)' files "
            "are byte for byte what it signed, and each run's figures agree with its own records; "
            "it does not prove the numbers were measured as stated")


def _envelope(folder: Path) -> tuple[dict, bytes]:
    try:
        return dsse.parse(read_regular(folder / ENVELOPE_FILE, "envelope", limit=dsse.MAX_ENVELOPE_BYTES))
    except dsse.EnvelopeError as exc:
        raise _Fail(f"{ENVELOPE_FILE}: {exc}") from None


def _signer(env: dict, payload: bytes, trusted: list):
    for key in trusted:
        if dsse.signature_by(env, payload, key.public, key.keyid):
            return key
    named = [s.get("keyid") for s in env["signatures"] if isinstance(s, dict)]
    known = [k for k in trusted if k.keyid in named]
    if known:
        raise _Fail(f"the signature of site {known[0].site!r}'s key does not match the statement: "
                    "it was changed after signing")
    shown = ", ".join(str(n)[:16] for n in named) or "none"
    raise _Fail(f"signed by a key this site does not trust (key id {shown}): add its public key "
                "to [results] trusted_keys only if you trust its site")


def _statement(payload: bytes) -> dict:
    try:
        stmt = json.loads(payload)
    except ValueError:
        raise _Fail("the signed statement is not JSON") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE \
            or stmt.get("predicateType") != PREDICATE_TYPE or not isinstance(stmt.get("subject"), list) \
            or not isinstance(stmt.get("predicate"), dict):
        raise _Fail(f"the signed statement is not an in-toto Statement v1 with predicate {PREDICATE_TYPE}")
    return stmt


def _check_key(key, site, expect_site, today: dt.date) -> None:
    if key.expires is not None and today > key.expires:
        raise _Fail(f"site {key.site!r}'s key (id {key.keyid[:16]}) expired on {key.expires}: "
                    "ask the site for its current key")
    if site != key.site:
        raise _Fail(f"the statement names site {site!r} but is signed with site {key.site!r}'s key: "
                    "a result replayed under another site's name")
    if expect_site is not None and site != expect_site:
        raise _Fail(f"the bundle is site {site!r}'s, not {expect_site!r}'s")


def _check_files(folder: Path, names: list[str], stmt: dict) -> None:
    signed = {}
    for s in stmt["subject"]:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) \
                or not isinstance((s.get("digest") or {}).get("sha256"), str):
            raise _Fail("the signed statement has a malformed subject")
        signed[s["name"]] = s["digest"]["sha256"]
    present = set(names) - {ENVELOPE_FILE}
    missing, added = sorted(set(signed) - present), sorted(present - set(signed))
    if missing:
        raise _Fail(f"{missing[0]} is signed but missing from the bundle")
    if added:
        raise _Fail(f"{added[0]} is in the bundle but not in the signed statement: added after signing")
    for name in sorted(signed):
        if sha256(read_regular(folder / name)) != signed[name]:
            raise _Fail(f"{name} is not the file that was signed (its SHA-256 differs): "
                        "changed or swapped after signing")


def _check_runs(folder: Path, stmt: dict, site: str) -> list[dict]:
    from hpcai.launcher.run.results import validation_errors

    runs = []
    for name in sorted(n["name"] for n in stmt["subject"] if n["name"].endswith("/result.json")):
        run = folder / name
        doc = json.loads(read_regular(run))
        measured_at = ((doc.get("spec") or {}).get("site") or {}).get("name")
        if measured_at != site:
            raise _Fail(f"{name} was measured under site {measured_at!r} but the statement names "
                        f"{site!r}: a result replayed under another site's name")
        errors = validation_errors(doc)
        if errors:
            raise _Fail(f"{name} does not match the result schema: {errors[0]}")
        samples = run.parent / RUN_FILES[2]
        block = recompute(doc, read_regular(samples) if samples.exists() else None)
        tampered = [c for c in block["checks"] if c["name"] in TAMPER_CHECKS and c["verdict"] == "fail"]
        if tampered:
            raise _Fail(f"{name}: {tampered[0]['name']}: {tampered[0]['note']}")
        runs.append({"folder": run.parent, "doc": doc, "validity": block})
    return runs
