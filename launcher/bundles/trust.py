"""The keys a site trusts for results: `[results] trusted_keys` in its site file,
each {site, key, expires}: whose key it is, its public key file (relative paths
from the site file's folder), and the last day it may sign (optional)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from hpcai.errors import ConfigError, UsageError
from hpcai.launcher.bundles import keys


@dataclass
class TrustedKey:
    site: str
    path: Path
    public: object
    keyid: str
    expires: dt.date | None


def _date(value, where: str) -> dt.date | None:
    if value in (None, ""):
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise ConfigError(f"{where}: expires {value!r} is not a date", "write it as YYYY-MM-DD") from None


def trusted_keys(site: dict) -> list[TrustedKey]:
    base = Path(site.get("path") or ".").parent
    found = []
    for i, entry in enumerate((site.get("results") or {}).get("trusted_keys") or []):
        where = f"site {site.get('name')!r} results.trusted_keys[{i}]"
        path = Path(entry["key"]).expanduser()
        path = path if path.is_absolute() else base / path
        try:
            public = keys.load_public(path, trusted=True)
        except UsageError as exc:
            raise ConfigError(f"{where}: {exc.message}", exc.hint) from None
        found.append(TrustedKey(entry["site"], path, public, keys.key_id(public),
                                _date(entry.get("expires"), where)))
    return found
