"""`hpcai-launch info` and `hpcai-launch power show|restore`."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys

import click

from hpcai.launcher.site import config as sites
from hpcai.launcher.run.plan import Node, journal_path
from hpcai.install import install_hint


def _backend(site: dict, method: str | None, vendor: str | None):
    from hpcai.launcher.power import make_backend

    return make_backend(method or site["power"]["method"], vendor, site["power"]["command"])


# The pyproject extra that installs each package.
_EXTRA_OF = {"tensorflow": "tf", "litgpt": "llm", "litdata": "llm", "sglang": "serve"}


def workload_stacks(images: dict) -> list[dict]:
    """Each workload and implementation: is its stack installed on this runtime
    (the host's Python), and is the image of its family present?"""
    from hpcai.workloads.catalog import WORKLOADS

    rows = []
    for workload in WORKLOADS.values():
        for name, impl in workload.impls.items():
            # What the implementation imports besides its framework (declared Impl.libraries);
            # checked by name only, nothing is imported.
            modules = list(dict.fromkeys((impl.framework, *impl.libraries)))
            missing = [m for m in modules if importlib.util.find_spec(m) is None]
            rows.append({"workload": workload.name, "impl": name, "modules": modules,
                         "host": not missing, "missing": missing,
                         "image_family": workload.image_family,
                         "image": images["present"].get(workload.image_family)})
    return rows


def show_info(site_selector: str | None, as_json: bool) -> None:
    site = sites.load(site_selector)
    node = Node.detect(site["gpu"]["vendor"])
    with _backend(site, None, node.vendor) as backend:
        may_set, why = backend.can_set()
        method = backend.name
    frameworks = {name: importlib.util.find_spec(name) is not None
                  for name in ("torch", "torchvision")}
    images = _images(site, node.vendor)
    stacks = workload_stacks(images)
    facts = {
        "vendor": node.vendor,
        "gpus": [g.to_dict() for g in node.gpus],
        "inaccessible_gpus": node.inaccessible,
        "device": "cuda" if node.gpus else "cpu",
        "runtime": "apptainer" if images["present"].get("cv") and images["apptainer"] else "host",
        "python": sys.executable,
        "frameworks": frameworks,
        "workloads": stacks,
        "apptainer": images["apptainer"],
        "images": images,
        "power_method": method,
        "can_set_caps": may_set,
        "can_set_caps_because": why,
        "site": {"name": site["name"], "path": site["path"]},
        "node_overhead_w": site["power"]["node_overhead_w"],
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    click.echo(f"site:          {site['name']} ({site['path']})")
    if node.gpus:
        click.echo(f"vendor:        {node.vendor}, {len(node.gpus)} GPU(s)")
        for g in node.gpus:
            mig = ", MIG mode (measured as the whole GPU; no caps)" if g.mig_enabled else ""
            click.echo(f"  GPU {g.index}: {g.name}, {g.memory_total_bytes / 2**30:.0f} GiB, {g.uuid}{mig}")
        for g in node.inaccessible:
            click.echo(f"  GPU {g['index']}: not accessible to this process ({g['reason']})")
    else:
        click.echo("vendor:        none (no GPU management library sees a GPU): runs use the CPU")
    if facts["runtime"] == "apptainer":
        click.echo(f"runtime:       apptainer ({images['apptainer']}), image {images['present']['cv']}")
    else:
        click.echo(f"runtime:       host ({sys.executable})")
    have = ", ".join(images["present"]) or "none"
    click.echo(f"images:        {images['flavour']} flavour in {images['dir']}: {have}"
               + ("" if images["apptainer"] else " (apptainer not installed)"))
    click.echo("workloads:     whether each one's stack is on this host, and its image here")
    width = max(len(f"{r['workload']} ({r['impl']})") for r in stacks)
    for r in stacks:
        extras = sorted({_EXTRA_OF.get(m, "cv") for m in r["missing"]})
        host = ("installed" if r["host"] else
                f"missing {', '.join(r['missing'])} ({install_hint(*extras)})")
        image = (f"image {r['image_family']}: present" if r["image"] else
                 f"image {r['image_family']}: absent")
        click.echo(f"  {(r['workload'] + ' (' + r['impl'] + ')'):<{width}}  host: {host}; {image}")
    click.echo(f"power method:  {method}")
    click.echo(f"may set caps:  {'yes' if may_set else 'no'} ({why})")
    click.echo(f"node overhead: {site['power']['node_overhead_w']:g} W")


def _images(site: dict, vendor: str | None) -> dict:
    """This node's flavour, the images folder, which families are there."""
    from hpcai.launcher.images import store
    from hpcai.workloads.catalog import IMAGE_FAMILIES

    flavour = store.flavour_for(vendor)
    present = {f: str(store.image_path(site, flavour, f)) for f in IMAGE_FAMILIES
               if store.image_path(site, flavour, f).is_file()}
    return {"flavour": flavour, "dir": str(store.images_dir(site)), "present": present,
            "apptainer": shutil.which(site["apptainer"]["executable"])}


@contextlib.contextmanager
def _node_backend(site_selector: str | None, method: str | None, what: str):
    """(the site, the backend over this node's GPUs) for the `power` views; None, said
    in a line, where no GPU is found."""
    site = sites.load(site_selector)
    node = Node.detect(site["gpu"]["vendor"])
    if not node.gpus:
        click.echo(f"no GPU found: there are no {what} to show")
        yield None
        return
    with _backend(site, method, node.vendor) as backend:
        yield site, backend


def show_power(site_selector: str | None, method: str | None) -> None:
    with _node_backend(site_selector, method, "power limits") as found:
        if found is None:
            return
        site, backend = found
        click.echo(f"{'GPU':<4} {'name':<28} {'current':>8} {'enforced':>9} {'default':>8} "
                   f"{'min':>6} {'max':>6}")
        for g in backend.gpus():
            lim = backend.limits(g.index)
            click.echo(f"{g.index:<4} {g.name[:28]:<28} {_w(lim.current_w):>8} "
                       f"{_w(lim.enforced_w):>9} {_w(lim.default_w):>8} {_w(lim.min_w):>6} "
                       f"{_w(lim.max_w):>6}")
    path = journal_path(site, None)
    from hpcai.launcher.power.clocks import clock_journal_path
    from hpcai.launcher.power.profiles import profile_journal_path

    for journal, what in ((path, "power"), (clock_journal_path(path), "clock"),
                          (profile_journal_path(path), "power profile")):
        if journal.exists():
            click.echo(f"note: a {what} journal exists at {journal}: "
                       "run `hpcai-launch power restore` if no run is active")


def _mhz(value) -> str:
    return "-" if value is None else f"{value:.0f} MHz"


def _w(value) -> str:
    return "-" if value is None else f"{value:.0f} W"


def restore_power(site_selector: str | None, method: str | None, journal: str | None,
                  force: bool = False) -> None:
    from hpcai.launcher.power import restore_from_journal
    from hpcai.launcher.power.clocks import clock_journal_path, restore_clocks_from_journal

    site = sites.load(site_selector)
    node = Node.detect(site["gpu"]["vendor"])
    path = journal_path(site, journal)
    clock_path = clock_journal_path(path)
    if not any(os.path.lexists(p) for p in (path, clock_path, _profile_path(path))):
        _restore_originals(site, method, node.vendor, path)
        return
    with _backend(site, method, node.vendor) as backend:
        _restore_profiles(backend, path, force)  # first: the run requested it last
        if clock_path.exists():  # clocks first: the run capped them last
            done = restore_clocks_from_journal(backend, path, force=force)
            for gpu in done["gpus"]:
                how = ("reset to the driver's default" if gpu["restore"] == "reset"
                       else f"limit back to {gpu['mhz']} MHz")
                click.echo(f"GPU {gpu['index']}: {'SM' if gpu['domain'] == 'sm' else 'memory'} "
                           f"clock {how}")
            click.echo(f"clock journal {clock_path} removed")
        if not path.exists():
            return
        done = restore_from_journal(backend, path, force=force)
    for gpu in done["gpus"]:
        click.echo(f"GPU {gpu['index']}: restored to {gpu['limit_w']:g} W "
                   f"(reads {gpu['read_back_w']:g} W)")
    click.echo(f"journal {path} removed")


def _profile_path(path):
    from hpcai.launcher.power.profiles import profile_journal_path

    return profile_journal_path(path)


def _restore_profiles(backend, path, force: bool) -> None:
    from hpcai.launcher.power.profiles import restore_profiles_from_journal

    if not os.path.lexists(_profile_path(path)):
        return
    done = restore_profiles_from_journal(backend, path, force=force)
    for gpu in done["gpus"]:
        click.echo(f"GPU {gpu['index']}: power profiles back to {', '.join(gpu['requested']) or 'none requested'}")
    click.echo(f"power profile journal {_profile_path(path)} removed")


def _restore_originals(site: dict, method: str | None, vendor, path) -> None:
    """No journal (never written, or deleted): the node-wide records of the cap
    authority still name the limits a dead run left applied (root only)."""
    from hpcai.launcher.power.session import restore_originals

    if not Node.detect(site["gpu"]["vendor"]).gpus:
        click.echo(f"no power journal at {path}: nothing to restore")
        return
    with _backend(site, method, vendor) as backend:
        done = restore_originals(backend)
    if not done:
        click.echo(f"no power journal at {path}: nothing to restore")
        return
    for gpu in done:
        click.echo(f"GPU {gpu['index']}: restored to {gpu['limit_w']:g} W from the node's record "
                   f"(no journal; reads {gpu['read_back_w']:g} W)")


def show_profiles(site_selector: str | None, method: str | None) -> None:
    """`hpcai-launch power profiles`: each GPU's power profiles, or why it has none."""
    from hpcai.errors import HpcaiError
    from hpcai.gpu.profiles import profile_control

    with _node_backend(site_selector, method, "power profiles") as found:
        if found is None:
            return
        _, backend = found
        for g in backend.gpus():
            try:
                control = profile_control(backend._device(g.index))
                offered, now = control.available(), control.current()
            except HpcaiError as exc:  # no profiles on this board or driver, or an AMD GPU
                click.echo(f"GPU {g.index}: no power profiles ({exc.message})")
                continue
            click.echo(f"GPU {g.index}: offered {', '.join(offered) or 'none'}; requested "
                       f"{', '.join(now['requested']) or 'none'}; enforced {', '.join(now['enforced']) or 'none'}")


def show_clocks(site_selector: str | None, method: str | None) -> None:
    """`hpcai-launch power clocks`: each GPU's clocks now and the ones it supports."""
    from hpcai.gpu.clocks import clock_control

    with _node_backend(site_selector, method, "clocks") as found:
        if found is None:
            return
        _, backend = found
        for g in backend.gpus():
            control = clock_control(backend._device(g.index))
            for domain, name in (("sm", "SM"), ("mem", "memory")):
                supported = control.supported(domain)
                now = control.current_mhz(domain)
                limit = control.limit_mhz(domain)
                values = (", ".join(map(str, sorted(supported.values, reverse=True)))
                          if supported.values is not None else
                          f"any MHz in {supported.lo}-{supported.hi}")
                click.echo(f"GPU {g.index} {name} clock: now {_mhz(now)}"
                           + (f", limit {_mhz(limit)}" if limit is not None else "")
                           + f"; supported: {values}")
