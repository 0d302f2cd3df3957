"""The measurement core: power sources, the sampler, statistics, validity,
adaptive windows and the serving steady state.

Framework-free and launcher-free (tests/unit/test_layering.py holds
this), so the launcher and the in-image workloads import the same rules.
"""

# The measurement API for any program (hpcai/measure/api.py): named windows and units.
from hpcai.measure.api import MeasureError, finish, step, window  # noqa: E402,F401
