"""The `fleet` command group (cli/hpcai_launch.py registers it in one line)."""
from __future__ import annotations

import sys

import click
from hpcai.launcher.sweep.cap_list import Caps
from hpcai.launcher.fleet.stats import DEFAULT_MIN_SPREAD, DEFAULT_THRESHOLD
from hpcai.launcher.cli.guarded import run_guarded


@click.group()
def fleet():
    """Fleet acceptance: every GPU measured under caps, the outliers named.

    \b
    Examples:
      hpcai-launch fleet run resnet50 --cap 300,500,700 --local -o acc
      hpcai-launch fleet run resnet50 --cap 300,700 --partition gpu -o acc
      hpcai-launch fleet status acc
      hpcai-launch fleet report acc -o acc-report
      hpcai-launch fleet report acc --baseline acc-last-year --json
    """

@fleet.command(name="run")
@click.argument("workload")
@click.option("--cap", "caps", type=Caps(), required=True,
              help="caps per GPU in watts: a list (300,500) or range (200:700:100)")
@click.option("--preset", help="the workload's preset (default: its default)")
@click.option("--output", "-o", required=True,
              help="campaign folder (the same folder again resumes the campaign)")
@click.option("--local", is_flag=True, help="this node's GPUs, without Slurm")
@click.option("--partition", help="Slurm: every node of this partition")
@click.option("--nodelist", help="Slurm: these nodes (comma list or Slurm range)")
@click.option("--nodes", type=click.IntRange(min=1), help="Slurm: this many nodes")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=4, show_default=True,
              help="Slurm: nodes measured at once (the array's %N)")
@click.option("--time", "time_limit", help="Slurm: time limit per node, e.g. 01:00:00")
@click.option("--account", help="Slurm: account")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]),
              help="passed to each GPU's run (cpu: a CPU workload on capped GPUs, tests)")
@click.option("--nproc", type=click.IntRange(min=1), help="passed on: CPU processes")
@click.option("--site", help="passed on: site name or .toml path")
@click.option("--power-method", type=click.Choice(["auto", "nvml", "amdsmi", "command"]))
@click.option("--runtime", type=click.Choice(["auto", "host", "apptainer"]))
@click.option("--in-run/--no-in-run", "in_run", default=None,
              help="passed on (default: in-run where the workload supports it)")
@click.option("--selftest/--no-selftest", default=True, show_default=True,
              help="each GPU's selftest (library, gpus, power) before it is measured")
@click.option("--selftest-s", type=click.FloatRange(min=0.5), default=5.0,
              show_default=True, help="selftest load and idle seconds")
def fleet_run(workload, caps, preset, output, local, partition, nodelist, nodes,
              max_concurrent, time_limit, account, device, nproc, site, power_method,
              runtime, in_run, selftest, selftest_s):
    """Measure WORKLOAD at every cap on every GPU, each GPU as its own run."""
    from hpcai.launcher.fleet.run import FleetRequest

    def go():
        _check_workload(workload, preset)
        if None in caps:
            raise click.UsageError("--cap needs watts for every entry")
        req = FleetRequest(
            workload=workload, caps=[float(c) for c in caps], output=output, preset=preset,
            passthrough={"--device": device, "--nproc": nproc, "--site": site,
                         "--power-method": power_method, "--runtime": runtime,
                         "--in-run": in_run is True, "--no-in-run": in_run is False},
            selftest_s=selftest_s, selftest=selftest, command=list(sys.argv))
        slurm = any(v is not None for v in (partition, nodelist, nodes))
        if local == slurm:
            raise click.UsageError("give --local (this node) or Slurm nodes (--partition, "
                                   "--nodelist, --nodes), one or the other")
        if local:
            from hpcai.launcher.fleet.run import run_local

            return run_local(req)
        from hpcai.launcher.fleet.slurm import submit

        return submit(req, partition=partition, nodelist=nodelist, nodes=nodes,
                      max_concurrent=max_concurrent, time_limit=time_limit,
                      account=account)

    sys.exit(run_guarded(go) or 0)

@fleet.command(name="node", hidden=True)
@click.argument("campaign", type=click.Path(exists=True, file_okay=False))
def fleet_node(campaign):
    """Inside a fleet job: measure this node's GPUs into CAMPAIGN."""
    from hpcai.launcher.fleet.slurm import run_node

    sys.exit(run_guarded(run_node, campaign) or 0)

@fleet.command(name="status")
@click.argument("campaigns", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def fleet_status(campaigns, as_json):
    """Progress of each CAMPAIGN: GPUs per state, caps done, nodes not started."""
    from hpcai.launcher.fleet.status import show

    sys.exit(run_guarded(show, list(campaigns), as_json) or 0)

def _expected_figures(ctx, param, values) -> tuple:
    """("300=1200", ...) -> ((300.0, 1200.0), ...): positive finite numbers, one per cap."""
    import math

    pairs = {}
    for text in values:
        cap, _, value = text.partition("=")
        try:
            pair = (float(cap), float(value))
        except ValueError:
            pair = None
        if pair is None or not all(math.isfinite(x) and x > 0 for x in pair) or pair[0] in pairs:
            raise click.BadParameter(f"{text!r} is not CAP=VALUE with a positive cap in watts and a "
                                     "positive throughput per GPU, one per cap (e.g. 300=1200)")
        pairs[pair[0]] = pair[1]
    return tuple(sorted(pairs.items()))


@fleet.command(name="report")
@click.argument("campaigns", nargs=-1, required=True)
@click.option("--output", "-o", help="folder for fleet.json/.md, the CSV files and plots/")
@click.option("--json", "as_json", is_flag=True, help="print the analysis as JSON")
@click.option("--threshold", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_THRESHOLD, show_default=True,
              help="|robust z-score| beyond which a GPU is an outlier (Iglewicz-Hoaglin)")
@click.option("--min-spread", type=click.FloatRange(min=0), default=DEFAULT_MIN_SPREAD,
              show_default=True,
              help="smallest scale of a z-score as a share of the median: differences "
                   "below it never count")
@click.option("--throttle-fail", type=click.FloatRange(min=0, max=1), default=0.10,
              show_default=True, help="thermal throttling in this share of readings fails")
@click.option("--baseline", multiple=True,
              help="an earlier campaign of the same GPUs: drift per GPU (by UUID)")
@click.option("--drift-warn", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="warn when a GPU's throughput fell (or energy per unit rose) by more")
@click.option("--expect-throughput", "expected", multiple=True, callback=_expected_figures,
              metavar="CAP=VALUE",
              help="the site's expected throughput per GPU at CAP watts: a GPU below it fails "
                   "(judges sets too small for the robust z: under 3 GPUs); repeatable")
def fleet_report(campaigns, output, as_json, threshold, min_spread, throttle_fail,
                 baseline, drift_warn, expected):
    """Per-GPU verdicts (pass/warn/fail with reasons) from CAMPAIGN folders.

    Exit status 1 when any GPU fails.
    """
    from hpcai.launcher.fleet.analysis import Settings
    from hpcai.launcher.fleet.report import build

    settings = Settings(threshold=threshold, min_spread=min_spread,
                        throttle_fail=throttle_fail, drift_warn=drift_warn,
                        expected_throughput=expected)
    sys.exit(run_guarded(build, list(campaigns), output, as_json, settings,
                         list(baseline) or None) or 0)


def _check_workload(name: str, preset: str | None) -> None:
    from hpcai.workloads.catalog import WORKLOADS

    from hpcai.errors import UsageError

    workload = WORKLOADS.get(name)
    if workload is None:
        raise UsageError(f"unknown workload {name!r}",
                         f"choose from: {', '.join(sorted(WORKLOADS))}")
    if preset is not None and preset not in workload.presets:
        raise UsageError(f"{name} has no preset {preset!r}",
                         f"choose from: {', '.join(workload.presets)}")
