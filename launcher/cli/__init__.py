"""The click commands of `hpcai-launch`, one module per command group; `hpcai_launch.py`
holds the top-level group. `main` is loaded on first use so a command module
(or `progress`, `terminal`) can be imported without loading every command.
"""
from __future__ import annotations


def __getattr__(name: str):
    # PEP 562: keeps `hpcai.launcher.cli:main` (the console script) working.
    if name == "main":
        from hpcai.launcher.cli.hpcai_launch import main
        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
