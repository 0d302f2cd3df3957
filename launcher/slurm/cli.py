"""`hpcai-launch slurm ...`: what hpcai reads from the cluster's Slurm itself.

`slurm mix` builds the job mix (the TOML `plan --mix` reads) from Slurm's
accounting (launcher/slurm/mix.py), for the user to edit.
"""
from __future__ import annotations

import click

from hpcai.launcher.cli.guarded import run_guarded

SITE_OPTION_HELP = "site name or .toml path whose [[classes]] rules sort jobs (default: $HPCAI_SITE, else by hostname)"


@click.group(name="slurm")
def slurm():
    """Read the cluster's Slurm: the job mix from its accounting."""


@slurm.command(name="mix")
@click.option("--since", required=True, help="jobs that ran since this date (YYYY-MM-DD[THH:MM[:SS]])")
@click.option("--partition", required=True, help="the partition whose jobs make the mix")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="the mix TOML file to write (new)")
@click.option("--site", "selector", help=SITE_OPTION_HELP)
def slurm_mix(since, partition, output, selector):
    """The job mix of PARTITION since a date from `sacct`, classes by the site's [[classes]] rules.

    Each class's share is its part of the GPU-hours (AllocTRES gres/gpu x elapsed)
    of the jobs a rule matched; the file says in comments what matched none.
    Edit it, then give it to `hpcai-launch plan --mix`.
    """
    run_guarded(write_mix, since, partition, output, selector)


def write_mix(since: str, partition: str, output: str, selector: str | None) -> None:
    from pathlib import Path

    from hpcai.errors import UsageError
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.slurm.mix import mix_from_sacct, mix_toml, sacct_args
    from hpcai.safe_files import Folder

    path = Path(output)
    if path.exists() or path.is_symlink():
        raise UsageError(f"{path} already exists", "give a new file to -o, or remove that one")
    if not path.parent.is_dir():
        raise UsageError(f"the folder {path.parent} does not exist", "give -o a file in an existing folder")
    sacct_args(since, partition)  # every option checked before Slurm is asked
    site = sites.load(selector)
    mix, tally = mix_from_sacct(site, since, partition)
    with Folder.open(path.parent) as folder:
        folder.write_text(path.name, mix_toml(mix, tally, since))
    shares = ", ".join(f"{c['name']} {c['share']:g}" for c in mix["class"])
    click.echo(f"wrote {path}: partition {partition}, {shares}")
