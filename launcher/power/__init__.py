"""Power caps: backends that read and set GPU limits, the on-disk journal, and
CapSession, which applies a cap for one run and always restores it."""
from __future__ import annotations

from hpcai.launcher.power.backends import (
    METHODS,
    AmdSmiBackend,
    CommandBackend,
    NoneBackend,
    NvmlBackend,
    PowerBackend,
    make_backend,
)
from hpcai.launcher.power.journal import default_journal_path, load_journal, remove_journal, write_journal
from hpcai.launcher.power.session import CapSession, install_signal_handlers, restore_from_journal

__all__ = [
    "METHODS",
    "AmdSmiBackend",
    "CapSession",
    "CommandBackend",
    "NoneBackend",
    "NvmlBackend",
    "PowerBackend",
    "default_journal_path",
    "install_signal_handlers",
    "load_journal",
    "make_backend",
    "remove_journal",
    "restore_from_journal",
    "write_journal",
]
