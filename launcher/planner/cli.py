"""The `plan` command's click definition (registered in launcher/cli.py)."""
from __future__ import annotations

import click

from hpcai.launcher.guarded import run_guarded


@click.command("plan")
@click.argument("results", nargs=-1)  # paths, bundles, oras:// references, as `report` reads
@click.option("--mix", required=True, type=click.Path(dir_okay=False),
              help="the job mix: a TOML file of [[class]] tables (name, workload, share, ...)")
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
def plan_command(results, mix, prices, budget_kw, targets, max_slowdown, objective, reference, output):
    """Which GPU model to buy and which cap each partition runs, for a job mix.

    RESULTS are what `report` reads (result files, run, sweep or results
    folders, verified bundles); with --reference the seed paper's rows fill
    in classes a GPU model was never measured on. Writes plan.json (every
    figure with its 95% interval), plan.md, plan.html and policy.toml (the
    site file's [policy] section).
    """
    from hpcai.launcher.planner import PlanOptions, make_plan

    opts = PlanOptions(mix=mix, output=output, prices=prices, budget_kw=budget_kw, targets=list(targets),
                       max_slowdown=max_slowdown, objective=objective, reference=reference)
    written = run_guarded(make_plan, list(results), opts)
    for line in written["headline"]:
        click.echo(line)
    for name in ("markdown", "html", "json", "policy"):
        click.echo(f"  {written['paths'][name]}")
