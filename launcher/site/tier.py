"""This node's measurement tier now (hpcai/measure/tier.py has the rules),
from the self-test's calibration: a root-owned JSON state file
(node_power.calibration_file), written through hpcai/safe_files.py (no-follow,
atomic) and believed only when the trust check (hpcai/ownership.py) passes with root
its only owner, so a user cannot promote their own results. Results, per-job receipts and
metrics call current_tier(site)."""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from hpcai.measure.tier import CALIBRATION_KIND, tier_config, calibration_path, tier_of


def store_calibration(site_or_config, calibration: dict) -> Path:
    """Written by root only (the tier it grants is the node's, not a user's), through
    the no-follow atomic writer; its folder made 0755 when missing."""
    from hpcai.errors import PowerPermissionError
    from hpcai.safe_files import Folder

    path = calibration_path(site_or_config)
    if os.geteuid() != 0:
        raise PowerPermissionError(f"the calibration {path} is root's state and this is uid {os.geteuid()}",
                                   "run the self-test's meter check as root to store it")
    with Folder.open(path.parent, create=True) as folder:
        folder.write_text(path.name, json.dumps(calibration, indent=2) + "\n")
    return path


def read_calibration(site_or_config) -> tuple[dict | None, str | None]:
    """(calibration, None), or (None, why it is not believed)."""
    from hpcai.ownership import path_problem

    path = calibration_path(site_or_config)
    if not os.path.lexists(path):
        return None, f"no calibration at {path} (run `hpcai-launch selftest --only meter` as root)"
    # Root's alone, as a result is trusted (launcher/site/trust.py: its two folders too).
    why = path_problem(path, owners={0}, kind="file", above=2)
    if why is not None:
        return None, why
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"{path} cannot be read as JSON ({exc})"
    if not isinstance(doc, dict) or doc.get("kind") != CALIBRATION_KIND:
        return None, f"{path} is not an hpcai calibration"
    return doc, None


def current_tier(site_or_config, now: dt.datetime | None = None) -> dict:
    """This node's tier now: for results, receipts and metrics. Never raises for a
    missing or untrusted calibration (that is tier counter, with the reason)."""
    config = tier_config(site_or_config)
    if (config.get("analyzer") or {}).get("name"):
        return tier_of(config, None, None, now)
    calibration, why = read_calibration(config)
    return tier_of(config, calibration, why, now)
