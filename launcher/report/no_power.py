"""The report's first screen where no run measured power: one sentence saying why
(each result's `power.reason`) and what would measure it, in place of a "Best cap"
table with no rows. Where some runs measured power, the table stays and its note
names the ones that did not."""
from __future__ import annotations

from hpcai.launcher.report.load import Run

# Linux 5.10 made the RAPL energy files root-only (CVE-2020-8694, "Platypus").
WHAT_WOULD_MEASURE = ("a GPU node (the GPUs' power through NVML or amdsmi), or on a CPU readable RAPL "
                      "counters (/sys/class/powercap/intel-rapl:*/energy_uj: root-only since Linux 5.10; "
                      "run as root, or have the administrator grant read access)")


def why_no_power(runs: list[Run]) -> str | None:
    """The sentence, or None when some run measured power (or none is usable)."""
    usable = [r for r in runs if r.usable]
    if not usable or any(r.power_available for r in usable):
        return None
    devices = ", ".join(sorted({r.device for r in usable}))
    reasons = "; ".join(sorted({r.power_reason or "no reason recorded" for r in usable}))
    return (f"No best cap: power was not measured on {devices} ({reasons}), so there is no work per "
            f"joule to rank caps by. What would measure it: {WHAT_WOULD_MEASURE}.")


def best_cap_section(runs: list[Run], table) -> list:
    sentence = why_no_power(runs)
    if sentence:
        return [sentence]
    return [table] if table else []
