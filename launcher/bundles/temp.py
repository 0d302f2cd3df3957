"""Scratch folders for pulled and unpacked bundles, removed when the process ends,
or sooner by remove_own: a forked worker leaves with os._exit, which runs no
atexit handler (report/forked.py), so it removes its own before it answers."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_MADE: list[tuple[int, Path]] = []  # (the process that made it, the folder)


def scratch(prefix: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    _MADE.append((os.getpid(), folder))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def remove_own() -> None:
    """This process's scratch folders removed now; a forked child never removes its
    parent's (it inherits the list, not the folders' ownership)."""
    own = [made for made in _MADE if made[0] == os.getpid()]
    for made in own:
        shutil.rmtree(made[1], ignore_errors=True)
        _MADE.remove(made)
