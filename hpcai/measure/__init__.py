"""The measurement core: power sources, the sampler, statistics, validity,
adaptive windows and the serving steady state.

Framework-free and launcher-free (tests/unit/test_layering.py holds
this), so the launcher and the in-image workloads import the same rules.
"""
