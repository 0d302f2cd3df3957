"""The measurement tier a node's energy figures stand on (issue 44 §3).

- ``counter``: the GPUs' own energy counters, checked against nothing outside.
- ``node-meter``: the counters were checked against the node's meter (IPMI,
  Redfish or pm_counters, whichever the site's [node_power] configures) by
  `hpcai-launch selftest --only meter`, agreed within the site's stated share,
  and that calibration is not older than the site's limit.
- ``analyzer``: the site declares an external power analyzer on this node's
  feed ([node_power.analyzer]) and the agreement it holds to.

Here the rules, pure (hpcai.measure imports no launcher): the calibration from
the two phases and the tier from a calibration. The root-owned state file and
current_tier(), which results, receipts and metrics call, are in
launcher/site/tier.py.
"""
from __future__ import annotations

import datetime as dt
import math
import socket
from dataclasses import dataclass
from pathlib import Path

TIERS = ("counter", "node-meter", "analyzer")
DEFAULT_CALIBRATION_FILE = "/var/lib/hpcai/calibration.json"
DEFAULT_AGREEMENT_FRAC = 0.05  # node-meter: counters and meter agree within this share
DEFAULT_MAX_AGE_DAYS = 30.0  # node-meter: a calibration older than this no longer counts
CALIBRATION_KIND = "hpcai.calibration"


@dataclass
class Phase:
    """One self-test phase: the GPUs' counter energies and the node meter's energy
    over the same window."""
    gpu_energy_j: list  # per GPU, from its counter
    node_energy_j: float
    window_s: float

    @property
    def gpu_w(self) -> float:
        return sum(self.gpu_energy_j) / self.window_s

    @property
    def node_w(self) -> float:
        return self.node_energy_j / self.window_s


def tier_config(site_or_config) -> dict:
    """A site (with its [node_power]) or that section itself."""
    config = site_or_config or {}
    return dict(config.get("node_power", config)) if "node_power" in config else dict(config)


def calibration_path(site_or_config) -> Path:
    return Path(tier_config(site_or_config).get("calibration_file") or DEFAULT_CALIBRATION_FILE)


def calibrate(idle: Phase, loaded: Phase, meter_api: str, when: dt.datetime | None = None) -> dict:
    """The calibration from an idle and a loaded phase. The non-GPU part (node
    meter minus GPU counters) is measured idle; under load the meter's view of
    the GPUs is its reading minus that offset, and the agreement is how far the
    counters' sum is from it, as a share of it."""
    offset_w = idle.node_w - idle.gpu_w
    meter_gpu_w = loaded.node_w - offset_w
    if not (meter_gpu_w > 0 and loaded.node_w > idle.node_w):
        agreement = None  # the load did not show at the meter: nothing was checked
    else:
        agreement = abs(loaded.gpu_w - meter_gpu_w) / meter_gpu_w
    when = when or dt.datetime.now(dt.timezone.utc)
    return {
        "kind": CALIBRATION_KIND,
        "host": socket.gethostname(),
        "date": when.isoformat(timespec="seconds"),
        "meter_api": meter_api,
        "agreement_within_frac": agreement,
        "offset_w": offset_w,
        "phases": {name: {"gpu_w": p.gpu_w, "node_w": p.node_w, "window_s": p.window_s,
                          "gpu_energy_j": list(p.gpu_energy_j), "node_energy_j": p.node_energy_j}
                   for name, p in (("idle", idle), ("loaded", loaded))},
    }


def tier_of(config: dict, calibration: dict | None, why_none: str | None,
            now: dt.datetime | None = None) -> dict:
    """The tier these figures stand on, with the agreement found and why not higher."""
    analyzer = config.get("analyzer") or {}
    if analyzer.get("name"):
        return _tier("analyzer", analyzer.get("agreement_frac"), analyzer.get("agreement_frac"),
                     analyzer["name"], None, None, None)
    stated = float(config.get("agreement_frac", DEFAULT_AGREEMENT_FRAC))
    if calibration is None:
        return _tier("counter", None, stated, None, None, None, why_none)
    found = calibration.get("agreement_within_frac")
    api, date, offset = calibration.get("meter_api"), calibration.get("date"), calibration.get("offset_w")
    why = _why_not_node_meter(config, calibration, found, stated, now)
    return _tier("counter" if why else "node-meter", found, stated, api, date, offset, why)


def _why_not_node_meter(config: dict, calibration: dict, found, stated: float,
                        now: dt.datetime | None) -> str | None:
    if calibration.get("host") != socket.gethostname():
        return f"the calibration is {calibration.get('host')!r}'s, not this node's"
    if not isinstance(found, (int, float)) or not math.isfinite(found):
        return "the calibration found no agreement (the load did not show at the meter)"
    if found > stated:
        return f"counters and meter differed by {found:.1%}, more than the stated {stated:.1%}"
    offset = calibration.get("offset_w")
    if not isinstance(offset, (int, float)) or not offset >= 0:
        return "the meter read less than the GPUs' counters idle: it does not cover these GPUs"
    try:
        when = dt.datetime.fromisoformat(calibration["date"])
        age = ((now or dt.datetime.now(dt.timezone.utc)) - when).total_seconds() / 86400
    except (KeyError, TypeError, ValueError):  # no date, or one without its time zone
        return "the calibration has no readable date with a time zone"
    max_days = float(config.get("max_calibration_age_days", DEFAULT_MAX_AGE_DAYS))
    if age > max_days:
        return f"the calibration is {age:.0f} days old, more than {max_days:g}"
    return None


def _tier(name, found, stated, api, date, offset, reason) -> dict:
    return {"tier": name, "agreement_within_frac": found, "stated_agreement_frac": stated,
            "meter_api": api, "calibrated": date, "offset_w": offset, "reason": reason}
