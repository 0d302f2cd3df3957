"""`hpcai-launch images build|list|pull|push|verify`."""
from __future__ import annotations

import json
from pathlib import Path

import click

from hpcai.workloads.catalog import IMAGE_FAMILIES

FLAVOUR_CHOICE = click.Choice(["cuda", "rocm", "cpu"])
FAMILY_HELP = "image family (repeatable; default: all of " + ", ".join(IMAGE_FAMILIES) + ")"


def _guarded(fn):
    from hpcai.launcher.cli.guarded import run_guarded as _run_guarded

    def wrapper(*args, **kwargs):
        return _run_guarded(fn, *args, **kwargs)

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def _context(site_selector: str | None):
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.images.apptainer import Apptainer

    site = sites.load(site_selector)
    return site, Apptainer(site["apptainer"]["executable"])


def _registry_context(site_selector: str | None, flavour: str | None):
    """pull and push: the site, Apptainer, the flavour (this node's by default), https."""
    site, apptainer = _context(site_selector)
    return site, apptainer, flavour or _node_flavour(), site["images"].get("registry_https", True)


def _node_flavour() -> str:
    from hpcai.gpu import detect_vendor
    from hpcai.launcher.images import store

    return store.flavour_for(detect_vendor())


def _key_value(pairs: tuple[str, ...]) -> dict[str, str]:
    from hpcai.errors import UsageError

    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--build-arg {pair!r} is not NAME=VALUE", "e.g. --build-arg PIP_INDEX_URL=...")
        out[name] = value
    return out


def _registry_uri(site: dict, flavour: str, family: str, tag: str | None) -> str:
    from hpcai.errors import ConfigError
    from hpcai.launcher.images import store

    uri = store.registry_uri(site, flavour, family, tag)
    if uri is None:
        raise ConfigError(f"site {site['name']!r} names no image registry",
                          "set [images] registry = \"oras://HOST/PATH\" in the site config")
    return uri


site_option = click.option("--site", help="site name or .toml path (default: matched by hostname)")
family_option = click.option("--family", "families", multiple=True,
                             type=click.Choice(IMAGE_FAMILIES), help=FAMILY_HELP)
flavour_option = click.option("--flavour", type=FLAVOUR_CHOICE,
                              help="cuda | rocm | cpu (default: this node's)")
tag_option = click.option("--tag", help="registry tag (default: the hpcai version)")


@click.group()
def images():
    """Build, list, share and verify the Apptainer images."""


@images.command()
@site_option
@family_option
@click.option("--flavour", type=FLAVOUR_CHOICE,
              help="cuda | rocm | cpu (default: detected from this host's GPU driver)")
@click.option("--build-arg", "build_args", multiple=True, metavar="NAME=VALUE",
              help="passed to apptainer build (repeatable), e.g. BASE_IMAGE=...")
@click.option("--bind", "binds", multiple=True, metavar="SRC[:DST]",
              help="bind a host folder during the build (repeatable), e.g. a CA bundle")
@click.option("--fakeroot/--no-fakeroot", default=True, show_default=True,
              help="build unprivileged (--no-fakeroot needs root)")
@click.option("--force", is_flag=True, help="rebuild images that exist")
@_guarded
def build(site, families, flavour, build_args, binds, fakeroot, force):
    """Build the images of one flavour (every family by default)."""
    from hpcai.launcher.images.build import build_one, detect_build_flavour

    site_doc, apptainer = _context(site)
    flavour = flavour or detect_build_flavour()
    extra = _key_value(build_args)
    for family in families or IMAGE_FAMILIES:
        build_one(site_doc, flavour, family, extra_args=extra, extra_binds=list(binds),
                  fakeroot=fakeroot, force=force, apptainer=apptainer)


@images.command(name="list")
@site_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@_guarded
def list_images(site, as_json):
    """Every flavour and family: present here?, labels, digest, registry address."""
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.images import store
    from hpcai.launcher.images.apptainer import Apptainer

    site_doc = sites.load(site)
    apptainer = Apptainer.find(site_doc["apptainer"]["executable"])
    rows = []
    for flavour in store.FLAVOURS:
        for family in IMAGE_FAMILIES:
            path = store.image_path(site_doc, flavour, family)
            row = {"flavour": flavour, "family": family, "path": str(path),
                   "present": path.is_file(), "registry": store.registry_uri(site_doc, flavour, family)}
            if path.is_file():
                row["size_mib"] = round(path.stat().st_size / 2**20, 1)
                row["sha256"] = store.sha256(path)
                if apptainer is not None:
                    row["labels"] = store.hpcai_labels(apptainer.labels(path))
            rows.append(row)
    if as_json:
        click.echo(json.dumps({"images_dir": str(store.images_dir(site_doc)), "images": rows}, indent=2))
        return
    click.echo(f"images folder: {store.images_dir(site_doc)}")
    click.echo(f"registry:      {site_doc['images'].get('registry') or '(none in site ' + site_doc['name'] + ')'}")
    for row in rows:
        if row["present"]:
            labels = row.get("labels", {})
            what = (f"{row['size_mib']:.0f} MiB  sha256 {row['sha256'][:12]}  "
                    f"hpcai {labels.get('version', '?')} commit {labels.get('commit', '?')[:12]}")
        else:
            what = "not here"
        click.echo(f"  {row['flavour']:<5} {row['family']:<10} {what}")


@images.command()
@site_option
@family_option
@flavour_option
@tag_option
@_guarded
def pull(site, families, flavour, tag):
    """Pull images from the site's registry into the images folder."""
    from hpcai.launcher.images import store

    site_doc, apptainer, flavour, _https = _registry_context(site, flavour)
    for family in families or IMAGE_FAMILIES:
        uri = _registry_uri(site_doc, flavour, family, tag)
        path = store.image_path(site_doc, flavour, family)
        click.echo(f"hpcai: pulling {uri} -> {path}", err=True)
        store.pull_verified(apptainer, site_doc, uri, path,
                            log=lambda message: click.echo(f"hpcai: {message}", err=True))
        click.echo(f"hpcai: {path.name} sha256 {store.sha256(path)}", err=True)


@images.command()
@site_option
@family_option
@flavour_option
@tag_option
@_guarded
def push(site, families, flavour, tag):
    """Sign (when the site names a key) and push images to the site's registry."""
    from hpcai.errors import RuntimeNotFoundError
    from hpcai.launcher.images import store

    site_doc, apptainer, flavour, https = _registry_context(site, flavour)
    key = site_doc["images"].get("sign_key")
    for family in families or IMAGE_FAMILIES:
        path = store.image_path(site_doc, flavour, family)
        if not path.is_file():
            raise RuntimeNotFoundError(f"image {path.name} is not in {path.parent}",
                                       f"build it first: `make images FLAVOUR={flavour}`")
        uri = _registry_uri(site_doc, flavour, family, tag)
        if key:
            apptainer.sign(path, Path(key))
            click.echo(f"hpcai: signed {path.name} with {key}", err=True)
        apptainer.push(path, uri, https=https)
        click.echo(f"hpcai: pushed {path.name} (sha256 {store.sha256(path)[:12]}) to {uri}", err=True)


@images.command()
@site_option
@family_option
@flavour_option
@click.option("--key", type=click.Path(exists=True, dir_okay=False),
              help="PEM public key (default: the site's [images] verify_key)")
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=False))
@_guarded
def verify(site, families, flavour, key, paths):
    """Check images' signatures: PATHS, or the images folder's."""
    from hpcai.errors import ConfigError, RuntimeNotFoundError
    from hpcai.launcher.images import store

    site_doc, apptainer = _context(site)
    key = key or site_doc["images"].get("verify_key")
    if not key:
        raise ConfigError("no key to verify against",
                          "pass --key PUBLIC.pem or set [images] verify_key in the site config")
    if not paths:
        flavour = flavour or _node_flavour()
        paths = [str(store.image_path(site_doc, flavour, f)) for f in families or IMAGE_FAMILIES]
    for name in paths:
        path = Path(name)
        if not path.is_file():
            raise RuntimeNotFoundError(f"image {path} does not exist",
                                       "pull it (`hpcai-launch images pull`) or build it (`make images`)")
        apptainer.verify(path, Path(key))
        click.echo(f"{path}: verified against {key} (sha256 {store.sha256(path)[:12]})")
