"""Numbers on the command line must be numbers: click's FloatRange lets "nan"
through every bound (each comparison with NaN is false) and "inf" through any
open-ended one, and they used to fail only after the cap was set (a traceback,
or a sweep.json left `running`). Checked before anything changes on the node."""
from __future__ import annotations

import math

from hpcai.errors import UsageError


def refuse_non_finite(params, values: dict) -> None:
    """params: the command's click parameters; values: what each was given."""
    for param in params:
        value = values.get(param.name)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, float) and not math.isfinite(item):
                flag = max(param.opts, key=len) if param.opts else param.name
                raise UsageError(f"{flag} {item} is not a finite number",
                                 f"give {flag} a finite value (or leave it out for the default)")
