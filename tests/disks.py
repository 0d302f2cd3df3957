"""A results folder that really fills up, for the full-disk tests."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "2m"):
    """A folder on a real tmpfs of `size` (it fills: ENOSPC). Mounting needs
    root; elsewhere the folder turns read-only instead (EACCES). Yields whether
    it was mounted."""
    folder.mkdir(parents=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        else:
            with contextlib.suppress(OSError):
                folder.chmod(0o755)
