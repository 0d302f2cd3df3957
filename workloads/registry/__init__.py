"""The suite's workloads, one declaration module each.

A module here declares one workload as `WORKLOAD = Workload(...)`
(workloads/declaration.py): its name, unit, presets, options, image family,
implementations with the generic options each honours and its FLOP model.
It imports no framework: the launcher reads it. hpcai.workloads.catalog finds
every module here (names starting with "_" are shared helpers, not workloads),
so adding a workload is this module, its implementation and its tests.
"""
