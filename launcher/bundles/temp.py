"""Scratch folders for pulled and unpacked bundles, removed when the process ends."""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch(prefix: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    return folder
