"""In-image side of hpcai: the measurement entrypoint and the workloads.

Importing this package imports no framework; workloads import theirs lazily.
"""
