"""`hpcai-launch site list|show|check`: the site configs this launcher can
use, the one it selects (merged with the defaults, and why), and whether that
site fits the machine the command runs on.

Kept free of heavy imports at module level, like hpcai_launch.py: each command imports
what it needs when it runs.
"""
from __future__ import annotations

import click

from hpcai.launcher.cli.guarded import run_guarded

SITE_OPTION_HELP = "site name or .toml path (default: $HPCAI_SITE, else matched by hostname)"


def _guarded(fn, *args):
    return run_guarded(fn, *args)


@click.group(name="site")
def site():
    """Site configs: list them, show the selected one, check it on this node."""


@site.command(name="list")
def site_list():
    """Available sites (name, file, hostname patterns), marking this host's."""
    _guarded(list_sites)


@site.command(name="show")
@click.option("--site", "selector", help=SITE_OPTION_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def site_show(selector, as_json):
    """The selected site, merged with the defaults, and why it was selected."""
    _guarded(show_site, selector, as_json)


@site.command(name="check")
@click.option("--site", "selector", help=SITE_OPTION_HELP)
def site_check(selector):
    """Validate the selected site and check it against this machine.

    One line per check (ok, warn or FAIL); the exit status is non-zero when
    any check FAILs. Nothing is changed: no cap is set, no helper is run.
    """
    _guarded(check_site, selector)


# --- list -------------------------------------------------------------------

def list_sites() -> None:
    import socket
    from pathlib import Path

    from hpcai.errors import ConfigError
    from hpcai.launcher.site import config as sites

    host = socket.gethostname()
    try:
        chosen, reason = sites.select(None, host)
        chosen_error = None
    except ConfigError as exc:
        chosen, reason, chosen_error = None, "", exc
    chosen_path = Path(chosen["path"]).resolve() if chosen else None
    for name, path in sites.available().items():
        mark = "*" if chosen_path == path.resolve() else " "
        click.echo(f"{mark} {name}  {path}")
        try:
            site = sites.parse(path)
        except ConfigError as exc:
            click.echo(f"    INVALID: {exc.one_line()}")
            continue
        patterns = ", ".join(site["hostnames"]) or (
            "(none: selected when nothing else matches)" if name == "default" else "(none)")
        click.echo(f"    hostnames: {patterns}")
        if site["description"]:
            click.echo(f"    {site['description']}")
    if chosen_error is not None:
        raise chosen_error
    click.echo(f"this host ({host}) selects {chosen['name']} ({chosen['path']}): {reason}")


# --- show -------------------------------------------------------------------

def show_site(selector: str | None, as_json: bool) -> None:
    import json
    from pathlib import Path

    from hpcai.launcher.site import config as sites

    site, reason = sites.select(selector)
    first = ("name", "description", "hostnames")
    body = {**{k: site[k] for k in first}, **{k: v for k, v in site.items() if k not in (*first, "path")}}
    resolved = {
        "results_dir": str(Path(site["paths"]["results"]).absolute()),
        "state_dir": str(sites.state_dir(site)),
        "images_dir": str(sites.images_dir(site)),
    }
    if as_json:
        click.echo(json.dumps({"path": site["path"], "selected_by": reason, "site": body,
                               "resolved": resolved}, indent=2))
        return
    click.echo(f"# site:        {site['name']}")
    click.echo(f"# file:        {site['path']}")
    click.echo(f"# selected by: {reason}")
    click.echo("# merged with the defaults; optional keys that are not set are commented out")
    paths = {("paths", "results"): "results_dir", ("paths", "state_dir"): "state_dir",
             ("images", "dir"): "images_dir"}
    notes = {
        **{(section, key): f"-> {resolved[name]}" for (section, key), name in paths.items()
           if site[section][key] != resolved[name]},
        **{("binds", key): (f"bound at {target}" if site["binds"][key] else "not bound")
           for key, target in sites.BIND_TARGETS.items()},
    }
    absent = {
        "gpu": {"per_node": "not declared"},
        "power": {"allowed_cap_range_w": "not set: each GPU's own range applies"},
    }
    for key, value in body.items():
        if not isinstance(value, dict):
            click.echo(f"{_toml_key(key)} = {_toml_value(value)}")
    for section, table in body.items():
        if not isinstance(table, dict):
            continue
        click.echo(f"\n[{_toml_key(section)}]")
        for key, value in table.items():
            line = f"{_toml_key(key)} = {_toml_value(value)}"
            note = notes.get((section, key))
            click.echo(f"{line}  # {note}" if note else line)
        for key, why in absent.get(section, {}).items():
            if key not in table:
                click.echo(f"# {key}: {why}")


def _toml_key(key: str) -> str:
    import re

    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def _toml_value(value) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value).replace("\x7f", "\\u007f")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


# --- check ------------------------------------------------------------------

OK, WARN, FAIL = "ok", "warn", "FAIL"
# Where sudo looks for a bare command name (Debian's and RHEL's secure_path).
SUDO_SECURE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# sudo options that take a value as the next argument.
SUDO_OPTIONS_WITH_VALUE = {"-C", "-D", "-g", "-h", "-p", "-R", "-r", "-t", "-T", "-U", "-u"}


class _Checks:
    def __init__(self):
        self.counts = {OK: 0, WARN: 0, FAIL: 0}

    def __call__(self, level: str, what: str, detail: str) -> None:
        self.counts[level] += 1
        click.echo(f"{level:<5} {what}: {detail}")


def check_site(selector: str | None) -> None:
    from hpcai.errors import ConfigError
    from hpcai.launcher.site import config as sites

    site, reason = sites.select(selector)  # an invalid file stops here, as one line
    report = _Checks()
    report(OK, "schema", f"{site['name']} ({site['path']}) is valid; selected by {reason}")
    library = _check_gpus(site, report)
    try:
        _check_power(site, library, report)
        _check_policy(site, library, report)
    finally:
        if library is not None:
            library.close()
    _check_node_power(site, report)
    _check_tier(site, report)
    _check_binds(site, report)
    _check_images(site, report)
    _check_apptainer(site, report)
    _check_folder(report, "paths.state_dir", sites.state_dir(site),
                  "power journals cannot be written there: runs with --cap will fail")
    _check_state_trust(report, sites.state_dir(site))
    from pathlib import Path

    _check_folder(report, "paths.results", Path(site["paths"]["results"]).absolute(),
                  "results cannot be written there: pass -o/--output, or change paths.results")
    counts = report.counts
    click.echo(f"{counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} FAIL")
    if counts[FAIL]:
        raise ConfigError(f"site {site['name']} does not fit this machine: "
                          f"{counts[FAIL]} check(s) FAIL", "fix the lines marked FAIL above")


def _check_node_power(site: dict, report) -> None:
    """One line per node power source: found (channels, rate), absent, or why not."""
    from hpcai.measure.node_power import open_sources

    config = site.get("node_power") or {}
    if not config.get("sources"):
        report(OK, "node_power", "no sources: efficiency with node uses power.node_overhead_w")
        return
    runs, status = open_sources(config)
    for run in runs:
        run.tick()  # one read, so a source that opens but cannot answer shows here
        run.stop()
        if run.faults:
            entry = next(s for s in status if s["source"] == run.source.kind)
            entry["status"], entry["detail"] = "unavailable", "; ".join(run.faults)
    for entry in status:
        level = {"ok": OK, "absent": OK, "unavailable": FAIL}[entry["status"]]
        report(level, f"node_power.{entry['source']}", f"{entry['status']}: {entry['detail']}")


def _check_tier(site: dict, report) -> None:
    """This node's measurement tier (docs/concepts/tiers.md): a node meter that was
    never calibrated, or not lately, is a warning."""
    from hpcai.launcher.site.tier import current_tier

    tier = current_tier(site)
    found = tier["agreement_within_frac"]
    text = tier["tier"] + (f", agreement within {found:.1%}" if found is not None else "")
    text += f" ({tier['reason']})" if tier["reason"] else ""
    meter = bool(site["node_power"].get("sources"))
    report(WARN if meter and tier["tier"] == "counter" else OK, "measurement tier", text)


def _check_gpus(site: dict, report):
    """The vendor's library and GPU count; returns the open library or None."""
    from hpcai.errors import HpcaiError
    from hpcai.gpu import open_library

    vendor = site["gpu"]["vendor"]
    per_node = site["gpu"].get("per_node")
    library = None
    try:
        library = open_library(vendor)
    except HpcaiError as exc:
        report(FAIL, "gpu.vendor", f"the site says {vendor}, but {exc.one_line()}")
    gpus = []
    if library is not None:
        try:
            gpus = [d.info() for d in library.devices()]
        except HpcaiError as exc:
            report(FAIL, "gpu.vendor", f"{library.vendor} library failed: {exc.one_line()}")
            library.close()
            library = None
    if library is not None:
        names = sorted({g.name for g in gpus})
        report(OK, "gpu.vendor", f"{vendor}: the {library.vendor} library sees {len(gpus)} GPU(s) "
                                 f"({', '.join(names)})")
    elif vendor == "auto":
        report(WARN, "gpu.vendor", "auto: no GPU management library (nvidia-ml-py, amdsmi) sees a "
                                   "GPU here, so runs use the CPU")
    if per_node is None:
        report(OK, "gpu.per_node", "not declared")
    elif library is None:
        level = OK if per_node == 0 else WARN
        report(level, "gpu.per_node", f"{per_node} declared; no GPU visible here to compare with")
    elif len(gpus) == per_node:
        report(OK, "gpu.per_node", f"{per_node}, as seen")
    else:
        report(WARN, "gpu.per_node", f"{per_node} declared, {len(gpus)} seen (a job given part of "
                                     "a node sees fewer; otherwise fix gpu.per_node)")
    return library


def _check_power(site: dict, library, report) -> None:
    import os

    power = site["power"]
    method = power["method"]
    seen = library.vendor if library is not None else None
    resolved = method
    if method == "auto":
        resolved = {"nvidia": "nvml", "amd": "amdsmi"}.get(seen, "none")
    what = "power.method"
    label = method if resolved == method else f"auto ({resolved})"
    if method == "auto" and resolved == "none":
        report(WARN, what, "auto: no GPU seen, so caps cannot be set here (runs without --cap only)")
    elif resolved == "none":
        report(OK, what, "none: caps are never set (runs without --cap only)")
    elif resolved in ("nvml", "amdsmi"):
        needs = "nvidia" if resolved == "nvml" else "amd"
        if seen != needs:
            report(FAIL, what, f"{label} needs {needs} GPUs, and its library sees none here")
        elif os.geteuid() == 0:
            report(OK, what, f"{label}: running as root, so limits can be set")
        else:
            report(WARN, what, f"{label}: not root, so runs with --cap will fail here; run them as "
                               "root, or use method command with a sudo helper")
    else:
        _check_power_command(power["command"], library, report)
    _check_cap_range(power.get("allowed_cap_range_w"), library, report)


def _check_power_command(template: str, library, report) -> None:
    import os

    from hpcai.launcher.power.backends import check_command_template
    from hpcai.launcher.site.power_helper import check_helper_setup

    argv = check_command_template(template)
    through_sudo = os.path.basename(argv[0]) == "sudo"
    helper = _sudo_target(argv) if through_sudo else argv[0]
    _check_command_program(argv, template, through_sudo, helper, library, report)
    # Then what makes the helper work for users: sudoers, its settings, the epilog.
    check_helper_setup(argv if through_sudo else None, helper, report)


def _check_command_program(argv: list[str], template: str, through_sudo: bool, helper: str | None,
                           library, report) -> None:
    import os
    import shutil

    what = "power.method"
    executable = shutil.which(argv[0])
    if executable is None:
        report(FAIL, what, f"command: {argv[0]} not found or not executable (from {template!r})")
        return
    found = executable
    if through_sudo:
        if helper is None:
            report(FAIL, what, f"command: no program named after sudo in {template!r}")
            return
        found = helper if "/" in helper else shutil.which(
            helper, path=os.pathsep.join([os.environ.get("PATH", ""), *SUDO_SECURE_PATH]))
        if found is None or not os.path.isfile(found):
            report(FAIL, what, f"command: helper {helper} not found (from {template!r})")
            return
    if library is None:
        report(WARN, what, f"command: {found} exists, but this method reads limits through "
                           "nvidia-ml-py or amdsmi, and neither sees a GPU here")
    else:
        report(OK, what, f"command: {found} exists (not run: only a real cap would test it)")


def _sudo_target(argv: list[str]) -> str | None:
    """The program sudo would run: the first argument after sudo's options."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg in SUDO_OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-") and "=" not in arg:
            return arg
    return None


def _check_cap_range(cap_range, library, report) -> None:
    from hpcai.errors import HpcaiError

    what = "power.allowed_cap_range_w"
    if not cap_range:
        report(OK, what, "not set: each GPU's own range applies")
        return
    lo, hi = cap_range
    if library is None:
        report(WARN, what, f"{lo:g}-{hi:g} W; no GPU visible here to compare with")
        return
    outside, disjoint = [], []
    try:
        for device in library.devices():
            index = device.info().index
            limits = device.power_limits()
            gmin = limits.min_w if limits.min_w is not None else float("-inf")
            gmax = limits.max_w if limits.max_w is not None else float("inf")
            if hi < gmin or lo > gmax:
                disjoint.append(f"GPU {index} ({_range(limits)})")
            elif lo < gmin or hi > gmax:
                outside.append(f"GPU {index} ({_range(limits)})")
    except HpcaiError as exc:
        report(WARN, what, f"{lo:g}-{hi:g} W; the GPUs' limits cannot be read: {exc.one_line()}")
        return
    if disjoint:
        report(FAIL, what, f"{lo:g}-{hi:g} W allows no cap on {', '.join(disjoint)}")
    elif outside:
        report(WARN, what, f"{lo:g}-{hi:g} W reaches past the range of {', '.join(outside)}: "
                           "caps there will be refused")
    else:
        report(OK, what, f"{lo:g}-{hi:g} W, within every GPU's range")


def _check_policy(site: dict, library, report) -> None:
    """The [policy] in force (the file's parse already held each cap to the site's range),
    and each cap against the range of this node's GPUs of that model."""
    from hpcai.errors import HpcaiError
    from hpcai.launcher.site.policy import describe, policy_entries
    from hpcai.measure.gpu_names import short_name

    lines = describe(site)
    if not lines:
        report(OK, "policy", "none: the Slurm prolog leaves each job's limits as they are")
        return
    cap_range = site["power"].get("allowed_cap_range_w")
    within = f"within power.allowed_cap_range_w {cap_range[0]:g}-{cap_range[1]:g} W" if cap_range \
        else "no power.allowed_cap_range_w: each GPU's own range applies"
    try:
        here = [(short_name(d.info().name), d.power_limits()) for d in library.devices()] if library else []
    except HpcaiError as exc:
        here = []
        report(WARN, "policy", f"the GPUs' limits cannot be read: {exc.one_line()}")
    for (where, entry), line in zip(policy_entries(site), lines):
        cap = entry.get("cap_w")
        outside = [_range(limits) for model, limits in here if cap is not None and model == entry["gpu"].upper()
                   and not (limits.min_w or 0) <= cap <= (limits.max_w or float("inf"))]
        if outside:
            report(FAIL, where, f"{line}: outside this node's {entry['gpu']} range {outside[0]}")
        else:
            report(OK, where, f"{line}{'; ' + within if cap is not None else ''}")


def _range(limits) -> str:
    lo = "?" if limits.min_w is None else f"{limits.min_w:g}"
    hi = "?" if limits.max_w is None else f"{limits.max_w:g}"
    return f"{lo}-{hi} W"


def _check_binds(site: dict, report) -> None:
    import os
    from pathlib import Path

    from hpcai.launcher.site.config import BIND_TARGETS

    for key, target in BIND_TARGETS.items():
        what = f"binds.{key}"
        value = site["binds"][key]
        if not value:
            report(OK, what, f"not bound (nothing at {target})")
            continue
        path = Path(value)
        if not path.exists():
            report(FAIL, what, f"{path} does not exist")
        elif not path.is_dir():
            report(FAIL, what, f"{path} is not a folder")
        elif not os.access(path, os.R_OK | os.X_OK):
            report(FAIL, what, f"{path} is not readable")
        elif key == "scratch" and not os.access(path, os.W_OK):
            report(WARN, what, f"{path} -> {target}, but it is not writable")
        else:
            report(OK, what, f"{path} -> {target}")


def _check_images(site: dict, report) -> None:
    import os
    from pathlib import Path

    from hpcai.launcher.site.config import IMAGES_DIR_ENV, images_dir

    images = site["images"]
    path = images_dir(site)
    source = (f"${IMAGES_DIR_ENV}" if os.environ.get(IMAGES_DIR_ENV) else
              "images.dir" if images["dir"] else "default ./images")
    state = _writable(path)
    if state == "writable":
        report(OK, "images.dir", f"{path} ({source}), writable")
    elif state == "read-only":
        report(WARN, "images.dir", f"{path} ({source}) is not writable: images can be used, "
                                   "not built or pulled here")
    elif state == "creatable":
        report(WARN, "images.dir", f"{path} ({source}) does not exist yet (made when images "
                                   "are built or pulled)")
    else:
        report(FAIL, "images.dir", f"{path} ({source}) {state}")
    registry = images["registry"]
    report(OK, "images.registry", f"{registry} (not contacted)" if registry else "none")
    for key, role in (("sign_key", "private key"), ("verify_key", "public key")):
        value = images[key]
        if not value:
            report(OK, f"images.{key}", "not set")
        elif not Path(value).is_file():
            report(FAIL, f"images.{key}", f"{role} file {value} does not exist")
        elif not os.access(value, os.R_OK):
            report(FAIL, f"images.{key}", f"{role} file {value} is not readable")
        else:
            report(OK, f"images.{key}", f"{value}")


def _check_apptainer(site: dict, report) -> None:
    import shutil

    executable = site["apptainer"]["executable"]
    found = shutil.which(executable)
    if found:
        report(OK, "apptainer.executable", found)
    else:
        report(WARN, "apptainer.executable", f"{executable} not found on PATH: runs use the host "
                                             "runtime, without images")


def _check_folder(report, what: str, path, consequence: str) -> None:
    state = _writable(path)
    if state == "writable":
        report(OK, what, f"{path}, writable")
    elif state == "creatable":
        report(OK, what, f"{path} (made on first use)")
    else:
        report(FAIL, what, f"{path} {'is not writable' if state == 'read-only' else state}: "
                           f"{consequence}")


def _check_state_trust(report, path) -> None:
    """A state folder (or a journal in it) another user could write or own is
    refused by every run and by `power restore`: say so here (issue 25)."""
    from hpcai.errors import PowerError
    from hpcai.launcher.power.journal import check_journal_file, check_state_dir

    what = "paths.state_dir ownership"
    if not path.exists() and not path.is_symlink():
        report(OK, what, f"{path} does not exist yet (made 0700 on first use)")
        return
    try:
        check_state_dir(path)
        for journal in sorted(path.glob("power-journal-*.json")):
            check_journal_file(journal)
    except PowerError as exc:
        report(FAIL, what, f"{exc.one_line()}: runs with --cap and `power restore` refuse it")
        return
    report(OK, what, f"{path}: owned by this user, not writable by others")


def _writable(path) -> str:
    """"writable", "read-only", "creatable", or why it can be neither."""
    import os

    if path.exists():
        if not path.is_dir():
            return "is not a folder"
        return "writable" if os.access(path, os.W_OK | os.X_OK) else "read-only"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return "creatable"
    return f"does not exist and cannot be made (in {parent})"
