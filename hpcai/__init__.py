"""hpcai: power-aware AI benchmarks for HPC centres."""
from __future__ import annotations

__version__ = "0.1.0"
