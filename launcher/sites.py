"""Site configs: one TOML file describes a system (GPUs, power method, node
overhead, paths), so the same benchmark runs at another centre by changing
only that file.

Selection: --site NAME|PATH, else $HPCAI_SITE, else the first shipped or
$HPCAI_SITE_DIR site whose hostname patterns match this host, else "default".
"""
from __future__ import annotations

import copy
import fnmatch
import json
import os
import socket
from importlib import resources
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from hpcai.errors import ConfigError

DEFAULTS = {
    "description": "",
    "hostnames": [],
    "gpu": {"vendor": "auto"},
    "power": {"method": "auto", "command": "", "cap_tolerance_frac": 0.05,
              "node_overhead_w": 100.0},
    "paths": {"results": "results", "state_dir": ""},
}


def shipped_dir() -> Path:
    return Path(str(resources.files("hpcai.sites")))


def search_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("HPCAI_SITE_DIR"):
        dirs.append(Path(os.environ["HPCAI_SITE_DIR"]))
    dirs.append(shipped_dir())
    return dirs


def _schema() -> dict:
    text = resources.files("hpcai").joinpath("schema/site-v1.schema.json").read_text()
    return json.loads(text)


def parse(path: Path) -> dict:
    """Read and validate one site file; ConfigError says what is wrong where."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read site file {path}: {exc.strerror}",
                          "check the path given to --site") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"site file {path} is not valid TOML ({exc})",
                          "fix the syntax at that line") from None
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(raw),
                    key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.path) or "(top level)"
        raise ConfigError(f"invalid site file {path}: {where}: {first.message}",
                          "see site/default.toml for the fields and their types")
    site = _merge(copy.deepcopy(DEFAULTS), raw)
    site["path"] = str(path)
    return site


def _merge(base: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def available() -> dict[str, Path]:
    """Site name -> file, earlier search folders winning."""
    found: dict[str, Path] = {}
    for folder in search_dirs():
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                found.setdefault(path.stem, path)
    return found


def load(selector: str | None = None, hostname: str | None = None) -> dict:
    selector = selector or os.environ.get("HPCAI_SITE") or None
    sites = available()
    if selector:
        if selector in sites:
            return parse(sites[selector])
        if selector.endswith(".toml") or os.sep in selector:
            if not Path(selector).exists():
                raise ConfigError(f"site file {selector} does not exist",
                                  "give an existing .toml file or a site name")
            return parse(Path(selector))
        raise ConfigError(f"unknown site {selector!r}",
                          f"choose one of: {', '.join(sorted(sites))}, or give a .toml path")
    host = hostname or socket.gethostname()
    for name, path in sites.items():
        if name == "default":
            continue
        site = parse(path)
        if any(fnmatch.fnmatch(host, pattern) for pattern in site["hostnames"]):
            return site
    return parse(sites["default"])
