"""Site configs: one TOML file describes a system (GPUs, power method, node
overhead, paths), so the same benchmark runs at another centre by changing
only that file.

Selection: --site NAME|PATH, else $HPCAI_SITE, else the first shipped or
$HPCAI_SITE_DIR site whose hostname patterns match this host, else "default".
`select` also says why a site was chosen; `load` returns the site alone.

A loaded site is DEFAULTS merged with the file, plus "path" (the file). Keys
that are optional and absent stay absent: gpu.per_node (not declared) and
power.allowed_cap_range_w (no site limit, the GPUs' own range applies).
"""
from __future__ import annotations

import copy
import fnmatch
import json
import math
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
    "gpu": {"vendor": "auto"},  # per_node: optional
    "power": {"method": "auto", "command": "", "cap_tolerance_frac": 0.05,
              "node_overhead_w": 100.0},  # allowed_cap_range_w: optional [lo, hi]
    # Node power beside the GPUs (RAPL, HPE Cray pm_counters, IPMI); [] = none.
    "node_power": {"sources": []},
    # pue, carbon_g_per_kwh, price_per_kwh, currency: optional; absent = not reported.
    "facility": {},
    # min_free_mb: a run refuses to start with less free space in the results folder.
    "paths": {"results": "results", "state_dir": "", "min_free_mb": 100},
    # Host folders bound at /data, /models and /scratch in the container; "" = not bound.
    "binds": {"data": "", "models": "", "scratch": ""},
    "images": {"dir": "", "registry": "", "registry_https": True, "sign_key": "", "verify_key": "",
               "build_binds": [], "build_args": {}, "mksquashfs_args": []},
    "apptainer": {"executable": "apptainer", "options": [], "env": {}, "forward_env": []},
    # Signed result bundles: this site's Ed25519 key; [{site, key, expires}] it trusts.
    "results": {"sign_key": "", "trusted_keys": []},
    # Per-job energy receipts' spool (hpcai-job-receipt); "" = /var/spool/hpcai/receipts.
    "receipts": {"spool": ""},
    "scheduler": {"kind": "slurm", "partition": "", "account": "", "time": "",
                  "extra_options": []},
}
BIND_TARGETS = {"data": "/data", "models": "/models", "scratch": "/scratch"}
IMAGES_DIR_ENV = "HPCAI_IMAGES_DIR"


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
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"site file {path} is not UTF-8 text (byte {exc.start}: "
                          f"{exc.object[exc.start:exc.start + 1]!r})",
                          "TOML files must be UTF-8; re-save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read site file {path}: {exc.strerror}",
                          "check the path given to --site") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"site file {path} is not valid TOML ({exc})",
                          "fix the syntax at that line") from None
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(raw),
                    key=lambda e: [str(p) for p in e.path])
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.path) or "(top level)"
        message = first.message
        if first.validator == "pattern" and first.schema.get("description"):
            message = f"{first.instance!r} {first.schema['description']}"
        raise ConfigError(f"invalid site file {path}: {where}: {message}",
                          "see site/default.toml for the fields and their types")
    _check_consistency(raw, path)
    site = _merge(copy.deepcopy(DEFAULTS), raw)
    site["path"] = str(path)
    return site


def _check_consistency(raw: dict, path) -> None:
    """What the schema cannot say: one ConfigError naming the field."""
    def invalid(where: str, message: str, hint: str | None = None):
        return ConfigError(f"invalid site file {path}: {where}: {message}",
                           hint or "see site/default.toml for the fields and their types")

    power = raw.get("power", {})
    cap_range = power.get("allowed_cap_range_w")
    if cap_range and not cap_range[0] < cap_range[1]:
        raise invalid("power.allowed_cap_range_w", f"{cap_range} is not [low, high] with low < high")
    if power.get("command"):
        from hpcai.launcher.power.backends import check_command_template

        try:
            check_command_template(power["command"])
        except ConfigError as exc:
            raise invalid("power.command", exc.message, exc.hint) from None
    node_power = raw.get("node_power", {})
    sources = node_power.get("sources", [])
    if "auto" in sources and len(sources) > 1:
        raise invalid("node_power.sources", f"{sources} mixes auto with named sources",
                      'give ["auto"] alone, or name the sources')
    for kind, where in (("ipmi", "host"), ("redfish", "url")):
        if kind in sources:
            section = node_power.get(kind, {})
            missing = [k for k in (where, "credentials_file") if not section.get(k)]
            if missing:
                raise invalid(f"node_power.{kind}.{missing[0]}", f"is required when sources has {kind}",
                              f"name the BMC's {where} and a file holding its credentials")
    _check_tier_settings(node_power, invalid)
    from hpcai.launcher.site import policy as site_policy

    site_policy.check(raw, invalid)
    vendor = raw.get("gpu", {}).get("vendor", "auto")
    needs = {"nvml": "nvidia", "amdsmi": "amd"}.get(power.get("method", "auto"))
    if needs and vendor not in ("auto", needs):
        raise invalid("power.method", f"{power['method']!r} does not work with gpu.vendor {vendor!r}",
                      f"use {'amdsmi' if vendor == 'amd' else 'nvml'}, command or auto")


def _check_tier_settings(node_power: dict, invalid) -> None:
    """TOML has nan and inf, which the schema's bounds let through."""
    for where, value in (("agreement_frac", node_power.get("agreement_frac")),
                         ("max_calibration_age_days", node_power.get("max_calibration_age_days")),
                         ("analyzer.agreement_frac", node_power.get("analyzer", {}).get("agreement_frac"))):
        if isinstance(value, float) and not math.isfinite(value):
            raise invalid(f"node_power.{where}", f"{value} is not a finite number")


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


def select(selector: str | None = None, hostname: str | None = None) -> tuple[dict, str]:
    """The site to use and why: (site, reason).

    selector is the --site value (a name or a .toml path); without it
    $HPCAI_SITE, then hostname patterns, then "default".
    """
    if selector:
        return _by_selector(selector), f"--site {selector}"
    if os.environ.get("HPCAI_SITE"):
        return _by_selector(os.environ["HPCAI_SITE"]), f"$HPCAI_SITE={os.environ['HPCAI_SITE']}"
    sites = available()
    host = hostname or socket.gethostname()
    for name, path in sites.items():
        if name == "default":
            continue
        site = parse(path)
        pattern = matching_pattern(site, host)
        if pattern is not None:
            return site, f"hostname {host!r} matches {pattern!r}"
    return parse(sites["default"]), f"default: no site's hostname patterns match {host!r}"


def load(selector: str | None = None, hostname: str | None = None) -> dict:
    return select(selector, hostname)[0]


def matching_pattern(site: dict, hostname: str) -> str | None:
    """The first of the site's hostname patterns that matches, or None."""
    return next((p for p in site["hostnames"] if fnmatch.fnmatch(hostname, p)), None)


def _by_selector(selector: str) -> dict:
    sites = available()
    if selector in sites:
        return parse(sites[selector])
    if selector.endswith(".toml") or os.sep in selector:
        if not Path(selector).exists():
            raise ConfigError(f"site file {selector} does not exist",
                              "give an existing .toml file or a site name")
        return parse(Path(selector))
    raise ConfigError(f"unknown site {selector!r}",
                      f"choose one of: {', '.join(sorted(sites))}, or give a .toml path")


def images_dir(site: dict) -> Path:
    """$HPCAI_IMAGES_DIR, else images.dir, else ./images; relative to the working directory.
    (The same order as hpcai.launcher.images.store.images_dir, which runs use.)"""
    folder = os.environ.get(IMAGES_DIR_ENV) or site["images"]["dir"] or "images"
    return Path(folder).expanduser().absolute()


def state_dir(site: dict) -> Path:
    """Where power journals go: paths.state_dir, else the journal module's default."""
    if site["paths"]["state_dir"]:
        return Path(site["paths"]["state_dir"]).absolute()
    from hpcai.launcher.power.journal import default_journal_path

    return default_journal_path().parent
