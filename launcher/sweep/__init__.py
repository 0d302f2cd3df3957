"""Sweeps: the cap list and grid, the sweep driver (one run per cap and
repeat, resumable) and in-run sweeps (all caps inside one process)."""
