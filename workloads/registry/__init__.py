"""The suite's workloads, one declaration module each.

A module here declares one workload as `WORKLOAD = Workload(...)`
(workloads/declaration.py): its name, unit, parameters (a frozen dataclass,
workloads/params.py, whose fields with a flag are its command-line options),
presets, image family, and implementations with the generic options each
honours, its FLOP model and its in-run capability. It imports no framework: the
launcher reads it. hpcai.workloads.catalog finds every module here (names
starting with "_" are shared helpers, not workloads) and every entry point of
the `hpcai.workloads` group (examples/plugin-workload), so adding a workload is
this module, its implementation and its tests.
"""
