"""Measurement tiers in the report (hpcai/measure/tier.py): each result's
power.tier says what its energy figures stand on (counter, node-meter,
analyzer). Every table of energy figures says its tier in a note; a table whose
figures stand on several tiers says so, lists them, and gets a Tier column, so
no comparison mixes tiers unsaid."""
from __future__ import annotations

from collections import Counter

HEADER = "Tier"
UNSTATED = "unstated"  # results written before schema 1.1 carry no tier


def run_tier(run) -> str:
    tier = (run.power_doc or {}).get("tier")
    return tier["tier"] if isinstance(tier, dict) and tier.get("tier") else UNSTATED


def _agreement(runs, tier: str) -> str:
    found = [t["agreement_within_frac"] for r in runs
             if isinstance(t := (r.power_doc or {}).get("tier"), dict) and t.get("tier") == tier
             and isinstance(t.get("agreement_within_frac"), (int, float))]
    return f", agreement within {max(found):.1%}" if found and tier != "counter" else ""


def row_label(runs) -> str:
    """The tiers of one row's runs, e.g. "node-meter" or "counter, node-meter"."""
    return ", ".join(sorted({run_tier(r) for r in runs})) or UNSTATED


def mixed(runs) -> bool:
    return len({run_tier(r) for r in runs}) > 1


def note(runs) -> str:
    """What the table's energy figures stand on; a warning naming the tiers when they differ."""
    counts = Counter(run_tier(r) for r in runs)
    if len(counts) <= 1:
        tier = next(iter(counts), UNSTATED)
        return (f"Measurement tier: {tier}{_agreement(runs, tier)} (counter: the GPUs' own energy "
                "counters; node-meter: checked against the node's meter; analyzer: an external "
                "analyzer; see Measurement tiers in the docs).")
    parts = ", ".join(f"{tier}{_agreement(runs, tier)} ({n} run{'s' * (n != 1)})"
                      for tier, n in sorted(counts.items()))
    return (f"This table mixes measurement tiers: {parts}. Figures of different tiers are not "
            "equally checked: compare within one tier (the Tier column, where there is one, "
            "gives each row's).")
