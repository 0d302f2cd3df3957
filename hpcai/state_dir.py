"""The user's state folder: where hpcai keeps what outlives a run on this node
(the power journal, the batch-size cache). One rule for the launcher and the
workloads: $HPCAI_STATE_DIR, else $XDG_STATE_HOME/hpcai, else ~/.local/state/hpcai.
"""
from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    base = os.environ.get("HPCAI_STATE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_STATE_HOME")
    return Path(xdg) / "hpcai" if xdg else Path.home() / ".local" / "state" / "hpcai"
