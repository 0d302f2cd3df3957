"""Power caps: backends that read and set GPU limits, the on-disk journal, and
CapSession, which applies a cap for one run and always restores it.

The names below are imported on first use (PEP 562), not with the package: the
Slurm prolog and epilog (`hpcai-job-receipt`) import only the helper and would
otherwise pay for the session's and the backends' imports on every job."""
from __future__ import annotations

import importlib

# Each public name -> the submodule that defines it.
_WHERE = {
    "METHODS": "backends", "AmdSmiBackend": "backends", "CommandBackend": "backends",
    "NoneBackend": "backends", "NvmlBackend": "backends", "PowerBackend": "backends",
    "make_backend": "backends",
    "default_journal_path": "journal", "load_journal": "journal", "remove_journal": "journal",
    "write_journal": "journal",
    "CapSession": "session", "install_signal_handlers": "session", "restore_from_journal": "session",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:  # a submodule (`from hpcai.launcher.power import helper`) is imported as usual
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
