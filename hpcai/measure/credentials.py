"""A BMC's credentials file (FreeIPMI's format, `username NAME` and
`password SECRET` lines), shared by the IPMI and Redfish sources."""
from __future__ import annotations

from pathlib import Path

from hpcai.measure.source import SourceError


def read_credentials(path) -> tuple[str, str]:
    """(username, password) from a FreeIPMI-style file; errors name the file only."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SourceError(f"credentials file {path} cannot be read "
                          f"({exc.strerror or type(exc).__name__})") from None
    values = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("username", "password"):
            values[parts[0]] = parts[1].strip()
    missing = [k for k in ("username", "password") if k not in values]
    if missing:
        raise SourceError(f"credentials file {path} has no {missing[0]} line "
                          "(a FreeIPMI config file: `username NAME`, `password SECRET`)")
    return values["username"], values["password"]
