"""`hpcai-launch results ...`: the results store's queries (launcher/cli/results_store_cli.py)
and signed, attested result bundles (launcher/bundles).

ls|show|export PATH...   list, show and export indexed results (DuckDB)

keygen PRIVATE_PATH      an Ed25519 key pair (never overwrites)
bundle RUN|SWEEP... -o DIR [--tar]   the runs' files and a signed in-toto statement
verify BUNDLE|REF        signature, trusted key, every file, schema, validity recomputed
push BUNDLE oras://...   / pull oras://... -o DIR   through an OCI registry (ORAS)
compare A B              are two runs (two centres') comparable, and why not
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hpcai.launcher.cli import results_store_cli as store_cli
from hpcai.printable import printable


def _guarded(fn, *args, **kwargs):
    from hpcai.launcher.cli.guarded import run_guarded

    return run_guarded(fn, *args, **kwargs)


def _site(selector: str | None) -> dict:
    from hpcai.launcher.site import config as sites

    return sites.load(selector)


def _https(site: dict) -> bool:
    return bool(site["images"].get("registry_https", True))


def _sign_key(site: dict, given: str | None) -> str | None:
    """--key, else [results] sign_key (relative to the site file's folder)."""
    if given:
        return given
    key = (site.get("results") or {}).get("sign_key")
    if not key:
        return None
    path = Path(key).expanduser()
    return str(path if path.is_absolute() else Path(site["path"]).parent / path)


@click.group(name="results")
def results():
    """Query the results store (ls, show, export) and make, verify, share and compare
    signed result bundles."""


@results.command()
@click.argument("private_path")
def keygen(private_path):
    """Make an Ed25519 key pair: PRIVATE_PATH (mode 0600) and PRIVATE_PATH.pub.

    Never overwrites a file. Name the private key in the site file
    ([results] sign_key); hand the .pub to the sites that will verify.
    """
    from hpcai.launcher.bundles import keys

    private, public, keyid = _guarded(keys.generate, private_path)
    click.echo(f"private key {private} (keep it; mode 0600), public key {public}, key id {keyid[:16]}")


@results.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--output", "-o", required=True, help="the bundle folder to make (new or empty)")
@click.option("--site", help="site name or .toml path (its name and [results] sign_key)")
@click.option("--key", help="Ed25519 private key (default: the site's [results] sign_key)")
@click.option("--tar", is_flag=True, help="also pack the bundle as OUTPUT.tar")
def bundle(runs, output, site, key, tar):
    """Bundle RUN or SWEEP folders: their files and a signed in-toto statement."""
    from hpcai.launcher.bundles.bundle import make

    def go():
        chosen = _site(site)
        return make(list(runs), output, chosen, _sign_key(chosen, key), tar)

    made = _guarded(go)
    click.echo(f"bundle {made['folder']}: {made['runs']} run(s), {made['files']} file(s), signed by "
               f"site {made['site']!r} (key {made['keyid'][:16]})"
               + (f"; packed as {made['tar']}" if made["tar"] else ""))


def _verdicts(items: list[str], site_selector: str | None, expect_site: str | None) -> list:
    from hpcai.launcher.bundles import registry
    from hpcai.launcher.bundles.bundle import unpack
    from hpcai.launcher.bundles.files import read_regular
    from hpcai.launcher.bundles.trust import trusted_keys
    from hpcai.launcher.bundles.temp import scratch
    from hpcai.launcher.bundles.verify import verify_bundle
    from hpcai.errors import UsageError

    site = _site(site_selector)
    trusted = trusted_keys(site)
    work = scratch("hpcai-verify-")
    found = []
    for i, item in enumerate(items):
        if registry.is_reference(item):
            folder = registry.pull(item, work / str(i), _https(site))
        elif Path(item).is_file() and item.endswith(".tar"):
            folder = unpack(read_regular(item, "packed bundle"), work / str(i))
        elif Path(item).is_dir():
            folder = Path(item)
        else:
            raise UsageError(f"{printable(item)} is not a bundle", "give a bundle folder, a .tar or an oras:// reference")
        found.append((item, verify_bundle(folder, trusted, expect_site)))
    return found


@results.command()
@click.argument("bundles", nargs=-1, required=True)
@click.option("--site", help="site name or .toml path (its [results] trusted_keys)")
@click.option("--expect-site", help="fail unless the bundle was signed by this site")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def verify(bundles, site, expect_site, as_json):
    """Verify bundles (folders, .tar files or oras:// references).

    Checks the signature against the site's trusted keys (and their expiry),
    that the statement's site is the key's, every file's SHA-256, the result
    schema, and recomputes validity from the samples with this version's
    thresholds. Exit status 1 unless every bundle is verified.
    """
    found = _guarded(_verdicts, list(bundles), site, expect_site)
    if as_json:
        click.echo(json.dumps([{"bundle": item, "status": v.status, "reason": v.reason, "site": v.site,
                                "keyid": v.keyid,
                                "runs": [{"run_id": r["doc"].get("run_id"),
                                          "validity": r["validity"]["verdict"],
                                          "failed": r["validity"]["failed"]} for r in v.runs]}
                               for item, v in found], indent=1))
    else:
        for item, v in found:
            click.echo(f"{printable(item)}: {v.status.upper()}: {printable(v.reason)}")
            for r in v.runs:
                block = r["validity"]
                failed = f" (failed: {', '.join(block['failed'])})" if block["failed"] else ""
                click.echo(f"  {r['doc'].get('run_id')}: validity {block['verdict'].upper()}{failed}, "
                           "recomputed with this version's thresholds")
    sys.exit(0 if all(v.status == "verified" for _, v in found) else 1)


@results.command()
@click.argument("bundle_path")
@click.argument("reference")
@click.option("--site", help="site name or .toml path (images.registry_https)")
def push(bundle_path, reference, site):
    """Push a bundle (folder or .tar) to oras://REGISTRY/NS/REPO:TAG."""
    from hpcai.launcher.bundles import registry

    def go():
        chosen = _site(site)
        runs = sorted(p.parent.name for p in Path(bundle_path).rglob("result.json")) \
            if Path(bundle_path).is_dir() else []
        return registry.push(bundle_path, reference, _https(chosen), chosen["name"], runs)

    digest = _guarded(go)
    click.echo(f"pushed {printable(bundle_path)} to {registry.shown(reference)} (layer {digest[:19]})")


@results.command()
@click.argument("reference")
@click.option("--output", "-o", required=True, help="the folder to unpack the bundle into (new)")
@click.option("--site", help="site name or .toml path (trusted keys, images.registry_https)")
def pull(reference, output, site):
    """Pull a bundle from oras://... into -o DIR, then verify it (exit 1 unless verified)."""
    from hpcai.launcher.bundles import registry
    from hpcai.launcher.bundles.trust import trusted_keys
    from hpcai.launcher.bundles.verify import verify_bundle

    def go():
        chosen = _site(site)
        trusted = trusted_keys(chosen)
        folder = registry.pull(reference, Path(output), _https(chosen))
        return folder, verify_bundle(folder, trusted)

    folder, v = _guarded(go)
    click.echo(f"pulled {registry.shown(reference)} into {printable(folder)}: {v.status.upper()}: {printable(v.reason)}")
    sys.exit(0 if v.status == "verified" else 1)


@results.command()
@click.argument("a")
@click.argument("b")
@click.option("--site", help="site name or .toml path (trusted keys, images.registry_https)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def compare(a, b, site, as_json):
    """Are the runs in A and B comparable? A and B: run folders, result files,
    bundles or oras:// references. Each pair of runs of one workload gets a
    verdict (comparable, comparable with caveats, different hardware, not comparable)
    and its reasons; on different hardware (same workload, settings, protocol and cap)
    the ratios B / A of throughput per GPU and units per joule with 95% intervals.
    Exit status 1 when a pair is not comparable."""
    from hpcai.launcher.bundles.compare_cli import compare_items
    from hpcai.launcher.bundles.hardware import ratio_lines

    pairs = _guarded(compare_items, a, b, site)
    if as_json:
        click.echo(json.dumps(pairs, indent=1))
    else:
        for p in pairs:
            click.echo(f"{p['a']} ({p['origin_a']}, {p['verification_a']}) vs {p['b']} "
                       f"({p['origin_b']}, {p['verification_b']}): {p['verdict'].upper()}")
            for r in p["reasons"]:
                click.echo(f"  {r['grade']}: {r['reason']}")
            for line in ratio_lines(p["ratios"]) if "ratios" in p else []:
                click.echo(f"  {line}")
    sys.exit(1 if any(p["verdict"] == "not comparable" for p in pairs) else 0)


for _command in (store_cli.ls, store_cli.show, store_cli.export):
    results.add_command(_command)
from hpcai.launcher.receipts.jobs_cli import jobs as _receipt_jobs  # noqa: E402 (issue 44: per-job receipts)

results.add_command(_receipt_jobs)
