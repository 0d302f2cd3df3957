"""The `plan` command's click definition (registered in launcher/cli/hpcai_launch.py)."""
from __future__ import annotations

import click

from hpcai.launcher.cli.guarded import run_guarded


@click.command("plan")
@click.argument("results", nargs=-1)  # paths, bundles, oras:// references, as `report` reads
@click.option("--mix", type=click.Path(dir_okay=False),
              help="the job mix: a TOML file of [[class]] tables (name, workload, share, ...)")
@click.option("--mix-from-sacct", is_flag=True,
              help="build the mix from Slurm's accounting (--since, --partition; classes by the site's "
                   "[[classes]] rules) and write it beside the plan as mix.toml, to edit and reuse with --mix")
@click.option("--mix-from-receipts", is_flag=True,
              help="build the mix from production's job receipts (the site's spool; classes by its [[classes]] "
                   "rules), with each class's measured energy per GPU-hour set beside the benchmark's")
@click.option("--since", help="--mix-from-sacct/--mix-from-receipts: jobs that ran since this date (YYYY-MM-DD)")
@click.option("--partition", help="--mix-from-sacct/--mix-from-receipts: the partition whose jobs make the mix")
@click.option("--site", "selector",
              help="--mix-from-sacct/--mix-from-receipts: site name or .toml path with the [[classes]] rules")
@click.option("--prices", type=click.Path(dir_okay=False),
              help="prices TOML: energy price, PUE, carbon intensity, lifetime, purchase per GPU model")
@click.option("--budget-kw", type=float,
              help="a partition's facility power budget (kW): the default cap gives the most work within it")
@click.option("--target", "targets", multiple=True, metavar="CLASS=UNITS_PER_S",
              help="work a class must sustain (its unit per second): nodes and power needed per GPU model")
@click.option("--max-slowdown", type=float, default=0.10, show_default=True,
              help="the most throughput a class may lose against its fastest cap (classes may set their own)")
@click.option("--objective", type=click.Choice(["energy", "cost", "co2"]), default="energy",
              show_default=True, help="what the default cap and the ranking minimise for the mix's work")
@click.option("--reference/--no-reference", default=False,
              help="fill classes a GPU model never measured with the seed paper's rows (labelled)")
@click.option("--output", "-o", default="plan", show_default=True,
              help="folder for plan.md, plan.html, plan.json and policy.toml")
def plan_command(results, mix, mix_from_sacct, mix_from_receipts, since, partition, selector, prices,
                 budget_kw, targets, max_slowdown, objective, reference, output):
    """Which GPU model to buy and which cap each partition runs, for a job mix.

    RESULTS are what `report` reads (result files, run, sweep or results
    folders, verified bundles); with --reference the seed paper's rows fill
    in classes a GPU model was never measured on. Writes plan.json (every
    figure with its 95% interval), plan.md, plan.html and policy.toml (the
    site file's [policy] section).
    """
    from hpcai.launcher.planner import PlanOptions

    opts = PlanOptions(mix=mix, output=output, prices=prices, budget_kw=budget_kw, targets=list(targets),
                       max_slowdown=max_slowdown, objective=objective, reference=reference)
    source = "sacct" if mix_from_sacct else "receipts" if mix_from_receipts else None
    if mix_from_sacct and mix_from_receipts:
        source = "both"
    written = run_guarded(_plan, list(results), opts, source, (since, partition, selector))
    for line in written["headline"]:
        click.echo(line)
    for name in ("markdown", "html", "json", "policy", "mix"):
        if name in written["paths"]:
            click.echo(f"  {written['paths'][name]}")


def _plan(paths: list, opts, source: str | None, window: tuple) -> dict:
    """The plan from --mix, or from a mix built from sacct or receipts (written beside
    the plan as mix.toml once the plan is made: a failed plan leaves nothing)."""
    import os
    import tempfile
    from pathlib import Path

    from hpcai.errors import UsageError
    from hpcai.launcher.planner import make_plan

    if source is None:
        if opts.mix is None:
            raise UsageError("plan needs a job mix", "give --mix FILE, or --mix-from-sacct --since DATE --partition P")
        return make_plan(paths, opts)
    if source == "both" or opts.mix is not None:
        raise UsageError(f"--mix and --mix-from-{source} both name a mix" if source != "both"
                         else "--mix-from-sacct and --mix-from-receipts both name a mix", "give one of them")
    since, partition, selector = window
    text = _sacct_mix_text(since, partition, selector) if source == "sacct" else \
        _receipts_mix_text(since, partition, selector)
    fd, temp = tempfile.mkstemp(prefix="hpcai-mix-", suffix=".toml")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        opts.mix = temp
        written = make_plan(paths, opts)
    finally:
        os.unlink(temp)
    from hpcai.safe_files import Folder

    with Folder.open(Path(opts.output)) as folder:
        written["paths"]["mix"] = folder.write_text("mix.toml", text)
    return written


def _receipts_mix_text(since: str | None, partition: str | None, selector: str | None) -> str:
    from hpcai.errors import UsageError
    from hpcai.launcher.receipts.jobs_cli import mix_from_receipts

    if not selector:
        raise UsageError("--mix-from-receipts needs --site (its spool and [[classes]] rules)", "give --site FILE")
    return mix_from_receipts(selector, since, partition)


def _sacct_mix_text(since: str, partition: str, selector: str | None) -> str:
    from hpcai.errors import UsageError

    if not since or not partition:
        raise UsageError("--mix-from-sacct needs --since and --partition", "e.g. --since 2026-10-01 --partition gpu")
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.slurm.mix import mix_from_sacct, mix_toml, sacct_args

    sacct_args(since, partition)  # every option checked before Slurm is asked
    mix, tally = mix_from_sacct(sites.load(selector), since, partition)
    return mix_toml(mix, tally, since)
