"""`hpcai-launch selftest`: does hpcai measure this node correctly?

Runs checks (library, gpus, power, meter, caps, sampler, workloads), prints a table
of ok / warn / FAIL / skipped rows, each with the value it measured, writes
the same as JSON, and exits 1 when any row FAILed. On a machine without GPUs
it runs what applies and says what it skipped.

Caps: checked only where this user may set them (root, or the site's power
command); otherwise the row is "skipped" with the reason, and asking for them
explicitly (--only caps) is a one-line error instead. Refused outright while a
power journal of an unrestored run exists: the self-test must not take a
limit it cannot tell from the site's own for the snapshot.
"""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import click

from hpcai.timestamps import now_iso
from hpcai.errors import DeviceError, PowerPermissionError, StaleJournalError, UsageError
from hpcai.launcher.selftest.base import STATUSES, Check, Context

CHECKS = ("library", "gpus", "power", "meter", "caps", "sampler", "workloads")
DEFAULT_LOAD_S = 20.0


def parse_only(values: tuple[str, ...] | list[str] | None) -> list[str]:
    """--only library,power --only caps -> the checks, in their run order."""
    names = [n.strip() for v in values or () for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}", f"choose from: {', '.join(CHECKS)}")
    return [c for c in CHECKS if c in names] if names else list(CHECKS)


def durations(load_s: float) -> dict:
    return {"load_s": load_s, "idle_s": min(5.0, load_s), "cap_s": min(5.0, load_s),
            "period_s": min(2.0, load_s), "sampler_s": min(5.0, load_s)}


def _open(vendor: str):
    """(library or None, why not, whether that is a failure)."""
    from hpcai.gpu import VENDORS, open_library
    from hpcai.gpu import _open as open_vendor

    try:
        library = open_library(vendor)
    except DeviceError as exc:  # the site names a vendor that fails here
        return None, [exc.one_line()], True
    if library is not None:
        return library, [], False
    reasons = []
    for name in VENDORS:
        try:
            open_vendor(name).close()
            reasons.append(f"{name}: the library sees no GPU")
        except DeviceError as exc:
            reasons.append(f"{name}: {exc.one_line()}")
    return None, reasons, False


def backend_for(method: str, library, command: str | None):
    """A power backend on the library already open (amdsmi's shutdown is process-wide)."""
    from hpcai.launcher.power.backends import (AmdSmiBackend, CommandBackend, NoneBackend,
                                               NvmlBackend, check_command_template)

    if method == "command":
        check_command_template(command or "")
        return CommandBackend(library, command)
    if method == "none":
        return NoneBackend(library)
    if method == "auto":
        method = "nvml" if library.vendor == "nvidia" else "amdsmi"
    if (method == "nvml") != (library.vendor == "nvidia"):
        raise UsageError(f"power method {method!r} does not fit this node's {library.vendor} GPUs",
                         "use --power-method auto")
    return NvmlBackend(library) if method == "nvml" else AmdSmiBackend(library)


def run_selftest(site_selector: str | None = None, only=None, as_json: bool = False,
                 output: str | None = None, load: bool = True, load_s: float = DEFAULT_LOAD_S,
                 power_method: str | None = None, journal: str | None = None,
                 workloads: str | None = None) -> int:
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.run.plan import journal_path
    from hpcai.launcher.run.visibility import visible_gpus
    from hpcai.measure.power_sources import find_rapl_domains

    selected = parse_only(only)
    explicit = bool(only)
    site = sites.load(site_selector)
    jpath = journal_path(site, journal)
    if jpath.exists():
        raise StaleJournalError(f"a power journal of an unrestored run exists at {jpath}",
                                "run `hpcai-launch power restore` first; selftest changes no limit "
                                "while one is there")
    library, reasons, library_failed = _open(site["gpu"]["vendor"])
    try:
        gpus = []
        if library is not None:
            devices = {d.info().uuid: d for d in library.devices()}
            gpus = [(devices[g.uuid], g, vid) for g, vid in visible_gpus([d.info() for d in devices.values()])]
        ctx = Context(site=site, library=library, vendor=library.vendor if library else None, gpus=gpus,
                      journal=jpath, no_gpu_reasons=reasons, load=load, durations=durations(load_s))
        if "caps" in selected and gpus:
            ctx.backend = backend_for(power_method or site["power"]["method"], library,
                                      site["power"]["command"])
            may, why = ctx.backend.can_set()
            if explicit and not may:
                raise PowerPermissionError(f"selftest --only caps asked for, but {why}",
                                           "run it as root, or configure the site's power command")
        elif "caps" in selected and explicit:
            raise UsageError("selftest --only caps needs a GPU, and none is visible here",
                             "run it on a GPU node")
        if not gpus:
            ctx.rapl, _ = find_rapl_domains()
        started = now_iso()
        rows = _run_checks(ctx, selected, library_failed, reasons, workloads)
    finally:
        if library is not None:
            library.close()
    doc = _document(rows, ctx, started)
    path = Path(output) if output else Path(f"hpcai-selftest-{socket.gethostname()}.json")
    path.write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        _table(rows)
        counts = ", ".join(f"{doc['summary'][s]} {s}" for s in STATUSES)
        click.echo(f"\n{counts}; JSON: {path}")
    return 1 if doc["summary"]["FAIL"] else 0


def _run_checks(ctx: Context, selected, library_failed: bool, reasons: list,
                workloads: str | None) -> list[Check]:
    """Each selected check's rows; one check failing must not hide the others'."""
    from hpcai.launcher.cli.progress import Progress
    from hpcai.launcher.selftest import gpu_checks, meter_check, workload_checks

    rows: list[Check] = []
    runners = {"library": gpu_checks.check_library, "gpus": gpu_checks.check_gpus,
               "power": gpu_checks.check_power, "meter": meter_check.check_meter,
               "caps": gpu_checks.check_caps,
               "sampler": gpu_checks.check_sampler,
               "workloads": lambda c: workload_checks.check_workloads(
                   c, [w for w in (workloads or "").split(",") if w])}
    with Progress("selftest", len(selected)) as progress:
        for name in selected:
            progress.step(name)
            rows.extend(_run_check(ctx, name, runners, library_failed, reasons))
    return rows


def _run_check(ctx: Context, name: str, runners: dict, library_failed: bool, reasons: list) -> list[Check]:
    if name == "library" and library_failed:
        return [Check("library", "GPU library", "FAIL", "; ".join(reasons))]
    if name == "power" and not ctx.gpus:
        return _cpu_power_rows(ctx)
    try:
        return list(runners[name](ctx))
    except Exception as exc:  # one check failing must not hide the others' rows
        message = exc.one_line() if hasattr(exc, "one_line") else f"{type(exc).__name__}: {exc}"
        return [Check(name, name, "FAIL", message)]


def _cpu_power_rows(ctx: Context) -> list[Check]:
    rows = [Check("power", "GPU power", "skipped", "no GPU")]
    if ctx.rapl:
        rows.append(Check("power", "CPU power (RAPL)", "ok", ", ".join(d.name for d in ctx.rapl)))
    else:
        from hpcai.measure.power_sources import find_rapl_domains

        rows.append(Check("power", "CPU power (RAPL)", "skipped", find_rapl_domains()[1]))
    return rows


def _document(rows: list[Check], ctx: Context, started: str) -> dict:
    from hpcai import provenance

    return {
        "kind": "hpcai.selftest",
        "started": started,
        "finished": now_iso(),
        "host": provenance.host_info(),
        "vendor": ctx.vendor,
        "gpus": [info.to_dict() for _, info, _ in ctx.gpus],
        "durations_s": ctx.durations,
        "checks": [r.to_dict() for r in rows],
        "summary": {s: sum(1 for r in rows if r.status == s) for s in STATUSES},
    }


def _table(rows: list[Check]) -> None:
    width = max([len(f"{r.check}: {r.item}") for r in rows] + [10])
    click.echo(f"{'CHECK':<{width}}  {'STATUS':<7}  VALUE")
    for r in rows:
        click.echo(f"{f'{r.check}: {r.item}':<{width}}  {r.status:<7}  {r.value}")


def selftest_command(fn_guard):
    """The click command; cli/hpcai_launch.py registers it (fn_guard: its one-line error wrapper)."""

    @click.command(name="selftest")
    @click.option("--only", multiple=True, metavar="CHECK[,CHECK]",
                  help=f"run only these checks: {', '.join(CHECKS)}")
    @click.option("--json", "as_json", is_flag=True, help="print the JSON instead of the table")
    @click.option("--output", "-o", help="JSON file (default: ./hpcai-selftest-HOST.json)")
    @click.option("--load/--no-load", default=True, show_default=True,
                  help="load the GPUs (torch matrix multiplies) for the energy and cap checks")
    @click.option("--load-s", type=click.FloatRange(min=0.5), default=DEFAULT_LOAD_S, show_default=True,
                  help="seconds of the load window")
    @click.option("--workloads", help="comma list of workloads (or WORKLOAD:IMPL) to run; default all")
    @click.option("--site", help="site name or .toml path")
    @click.option("--power-method", type=click.Choice(["auto", "nvml", "amdsmi", "command", "none"]))
    @click.option("--journal", help="power journal path (default: this host's)")
    def selftest(only, as_json, output, load, load_s, workloads, site, power_method, journal):
        """Check that hpcai measures this node correctly: the GPU library, each
        GPU's identity and MIG state, power fields and their update period,
        idle power, the energy counter against integrated power under load,
        the counters against the node's meter (stored as the node's calibration),
        caps (min, middle, default; only where permitted), the sampler's cost,
        and a short run of each installed workload. Exit status 1 on any FAIL."""
        rv = fn_guard(run_selftest, site, only, as_json, output, load, load_s, power_method,
                      journal, workloads)
        sys.exit(rv or 0)

    return selftest
