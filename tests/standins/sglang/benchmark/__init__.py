"""STAND-IN for the sglang.benchmark package (see sglang/__init__.py)."""
