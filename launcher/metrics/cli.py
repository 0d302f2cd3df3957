"""`hpcai-launch metrics serve|textfile`: this node's GPUs, node power and hpcai runs
for Prometheus (docs/how-to/monitoring.md)."""
from __future__ import annotations

import time
from pathlib import Path

import click

from hpcai.launcher.metrics.sampler import DEFAULT_MAX_AGE_S


def _guarded(fn, *args, **kwargs):
    from hpcai.launcher.cli.guarded import run_guarded

    return run_guarded(fn, *args, **kwargs)


def _check_seconds(flag: str, value: float | None) -> None:
    import math

    from hpcai.errors import UsageError

    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} {value} is not a positive number of seconds", f"give {flag} a finite value > 0")


def open_sampler(site_selector: str | None, max_age_s: float):
    """The node's GPUs (through hpcai.gpu) and the site's node power sources, behind one
    cached sampler. DeviceError when the site names a vendor that fails here."""
    from hpcai.gpu import open_library
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.metrics.sampler import CachedSampler
    from hpcai.measure.node_power import open_sources
    from hpcai.workloads.catalog import WORKLOADS

    site = sites.load(site_selector)
    library = open_library(site["gpu"].get("vendor", "auto"))
    runs, _status = open_sources(site.get("node_power"))
    gpus = library.devices() if library is not None else []
    sampler = CachedSampler(gpus, [run.source for run in runs], max_age_s, workloads=WORKLOADS)
    return sampler, library


@click.group(name="metrics")
def metrics():
    """Live metrics for Prometheus: per GPU power, energy, limit and its holder, clocks,
    temperature, throttling; node power; the hpcai runs on this node."""


_site_option = click.option("--site", default=None, help="site name or .toml path (its gpu.vendor and node_power)")
_max_age_option = click.option("--max-age", "max_age_s", type=float, default=DEFAULT_MAX_AGE_S, show_default=True,
                               help="seconds a reading of the node is reused across scrapes")


@metrics.command()
@click.option("--port", type=click.IntRange(0, 65535), default=9833, show_default=True,
              help="TCP port (0: any free one, printed)")
@click.option("--address", default="127.0.0.1", show_default=True, help="address to listen on")
@_site_option
@_max_age_option
def serve(port, address, site, max_age_s):
    """Serve /metrics over HTTP (Prometheus text; OpenMetrics when the scraper asks for it)."""
    _guarded(_serve, port, address, site, max_age_s)


def _serve(port: int, address: str, site: str | None, max_age_s: float) -> None:
    from prometheus_client import start_http_server

    from hpcai.errors import UsageError
    from hpcai.launcher.metrics.collector import registry_for

    _check_seconds("--max-age", max_age_s)
    sampler, library = open_sampler(site, max_age_s)
    try:
        try:
            server, thread = start_http_server(port, address, registry_for(sampler))
        except OSError as exc:
            raise UsageError(f"cannot listen on {address}:{port} ({exc.strerror or exc})",
                             "choose a free --port, or an --address of this node") from None
        host, bound = server.server_address[:2]
        click.echo(f"hpcai-launch: serving metrics of {len(sampler.gpus)} GPU(s) on http://{host}:{bound}/metrics",
                   err=True)
        while thread.is_alive():
            thread.join(1.0)
    finally:
        sampler.close()
        if library is not None:
            library.close()


@metrics.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--every", "every_s", type=float, default=None,
              help="rewrite the file every SECONDS until stopped (default: write once and exit)")
@_site_option
@_max_age_option
def textfile(directory, every_s, site, max_age_s):
    """Write DIRECTORY/hpcai.prom for node_exporter's textfile collector, atomically."""
    _guarded(_textfile, directory, every_s, site, max_age_s)


def _textfile(directory: Path, every_s: float | None, site: str | None, max_age_s: float) -> None:
    from hpcai.launcher.metrics.collector import exposition, registry_for
    from hpcai.launcher.metrics.textfile import open_textfile_folder, write_textfile

    _check_seconds("--every", every_s)
    _check_seconds("--max-age", max_age_s)
    folder = open_textfile_folder(directory)  # checked before the GPUs are opened
    try:
        sampler, library = open_sampler(site, max_age_s)
        try:
            registry = registry_for(sampler)
            while True:
                path = write_textfile(folder, exposition(registry))
                if every_s is None:
                    click.echo(f"hpcai-launch: wrote {path}", err=True)
                    return
                time.sleep(every_s)
        finally:
            sampler.close()
            if library is not None:
                library.close()
    finally:
        folder.close()
