"""`results compare A B`: pair the runs of one workload across A and B."""
from __future__ import annotations

from hpcai.errors import UsageError
from hpcai.launcher.bundles.compare import NOT_COMPARABLE, compare
from hpcai.launcher.bundles.sources import load


def compare_items(a: str, b: str, site_selector: str | None) -> list[dict]:
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.bundles.trust import trusted_keys

    site = sites.load(site_selector)
    trusted, https = trusted_keys(site), bool(site["images"].get("registry_https", True))
    left, right = load([a], trusted, https), load([b], trusted, https)
    pairs = []
    for x in left:
        for y in right:
            if x.doc is None or y.doc is None:
                if x.doc is None and y.doc is None:
                    continue
                bad = x if x.doc is None else y
                pairs.append(_pair(x, y, {"verdict": NOT_COMPARABLE, "reasons": [
                    {"grade": NOT_COMPARABLE, "reason": f"{bad.label} failed verification: {bad.reason}"}]}))
                continue
            if x.doc.get("workload") == y.doc.get("workload"):
                verdict = compare(x.doc, y.doc, x.validity, y.validity)
                if "failed" in (x.verification, y.verification):
                    verdict["verdict"] = NOT_COMPARABLE
                    verdict.pop("ratios", None)  # no figures from a bundle that failed
                pairs.append(_pair(x, y, verdict))
    if not pairs:
        raise UsageError(f"{a} and {b} share no workload", "compare runs of one workload")
    return pairs


def _pair(x, y, verdict: dict) -> dict:
    return {"a": (x.doc or {}).get("run_id") or x.label, "b": (y.doc or {}).get("run_id") or y.label,
            "origin_a": x.origin, "origin_b": y.origin,
            "verification_a": x.verification, "verification_b": y.verification, **verdict}
