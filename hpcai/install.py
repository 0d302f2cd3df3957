"""How hpcai is installed, in one place: the distribution's name and the hint that
every "this extra is missing" message prints.

The distribution is `hpcai-power-bench`: `hpcai` on the package index is an
unrelated project, which installing `hpcai` from the index (with any extra)
would bring. The
import package stays `hpcai` and the command `hpcai-launch` (both are ours on a
node and in an image; only the index name collides).
"""
from __future__ import annotations

DISTRIBUTION = "hpcai-power-bench"


def install_hint(*extras: str) -> str:
    """The install line for the given extras as it works: from hpcai's checkout (hpcai
    is not on the package index; its images already carry their family's extras)."""
    return f"pip install '.[{','.join(extras)}]' from the hpcai checkout"
