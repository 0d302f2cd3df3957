"""`hpcai-launch`: the command users type. Kept free of framework imports so
`--help` is instant; each command imports what it needs when it runs.
"""
from __future__ import annotations

import sys

import click
from hpcai.launcher.sweep.cap_list import Caps, Repeats
from hpcai.launcher.cli.guarded import run_guarded as _run_guarded
from hpcai.workloads.catalog import WORKLOADS, check_plugins

import hpcai
from hpcai.errors import HpcaiError
from hpcai.measure.adaptive import SWEEP_CI_TARGET

# Commands that must work while an installed workload plugin is broken: putting
# limits back after a crash cannot wait for someone to fix a third-party package.
WITHOUT_PLUGINS = ("power",)

PRECISIONS = ("auto", "fp32", "tf32", "32-true", "bf16-mixed", "fp16-mixed", "bf16-true")
POWER_METHODS = ("auto", "nvml", "amdsmi", "command", "none")


class Clocks(click.ParamType):
    """MHz per GPU: one clock, a list (1005,1410) or a range (1005:1980:165, stop
    included), as a sorted list; checked against each GPU's supported clocks."""

    name = "MHZ|LIST|START:STOP:STEP"

    def __init__(self, flag: str):
        self.flag = flag

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        from hpcai.launcher.sweep.axes import parse_clocks

        try:
            return parse_clocks(value, self.flag)
        except HpcaiError as exc:
            self.fail(exc.one_line(), param, ctx)
class PowerProfiles(click.ParamType):
    """Power profile names (NVML's, or AMD's determinism-MHZ), comma-separated: one run per profile."""

    name = "NAME[,NAME...]"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        from hpcai.gpu.profiles import profile_name

        try:
            names = [profile_name(n) for n in str(value).split(",")]
        except HpcaiError as exc:
            self.fail(exc.one_line(), param, ctx)
        if len(set(names)) != len(names):
            self.fail(f"{value!r} names a profile twice: give each once", param, ctx)
        return names


class CiTarget(click.ParamType):
    """A relative 95% confidence half-width strictly between 0 and 1, or "off"."""

    name = "FRACTION|off"

    def convert(self, value, param, ctx):
        if value in ("off", None) or isinstance(value, float):
            return value
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is None or not 0 < number < 1:
            self.fail(f"{value!r} must lie between 0 and 1 (a share of the mean), or be 'off': "
                      "e.g. --ci-target 0.01 for a 1% half-width", param, ctx)
        return number


class OneLineErrors(click.Group):
    """Click's usage errors as one line that names the problem and the fix."""

    def main(self, args=None, prog_name=None, **kwargs):
        try:
            rv = super().main(args=args, prog_name=prog_name, standalone_mode=False, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "hpcai-launch"
            message = " ".join(exc.format_message().rstrip(".").split())
            click.echo(f"hpcai-launch: error: {message}: see `{where} --help`", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("hpcai-launch: aborted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"hpcai-launch: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def resolve_command(self, ctx, args):
        name = args[0] if args else None
        if name not in WITHOUT_PLUGINS:
            _run_guarded(check_plugins)  # a broken plugin: its one line, no traceback
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            known = ", ".join(sorted(WORKLOADS))
            commands = ", ".join(sorted(c for c in self.list_commands(ctx) if c not in WORKLOADS
                                        and not self.get_command(ctx, c).hidden))
            raise click.UsageError(
                f"unknown workload or command {name!r} (workloads: {known}; "
                f"commands: {commands})", ctx)
        name, command, rest = super().resolve_command(ctx, args)
        from hpcai.launcher.cli.finite_options import guard_floats  # NaN/inf: one line, exit 2

        return name, guard_floats(command) if command is not None else command, rest


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(hpcai.__version__, prog_name="hpcai-launch")
@click.option("--site", "site_for_all", metavar="NAME|PATH",
              help="the site for every command, as $HPCAI_SITE (a command's own --site wins)")
def main(site_for_all):
    """Power-aware AI benchmarks: throughput, power and energy per GPU,
    under GPU power caps.

    \b
    Examples:
      hpcai-launch list                       workloads and presets
      hpcai-launch info                       GPUs, power method, site
      hpcai-launch resnet50                   run on every GPU (or the CPU)
      hpcai-launch resnet50 --cap 300         the same under a 300 W cap per GPU
      hpcai-launch resnet50 --cap 200:700:100 --repeat 3   a cap sweep
      hpcai-launch resnet50 --sm-clock 1005,1410,1980     a clock-cap sweep
      hpcai-launch resnet50 --cap 200:700:100 --ci-target 0.01
                                              a sweep in one process (in-run), each
                                              window until its 95% CI is within 1%
      hpcai-launch resnet50 --preset tiny --dry-run
      hpcai-launch resnet50 --vary gpus=1,2,4 --vary batch_size=64,128   a grid sweep
      hpcai-launch data make resnet50 --samples 10000 -o imgs   a dataset on disk
      hpcai-launch resnet50 --data imgs       train from it; the data-wait time recorded
      hpcai-launch power show                 current power limits
      hpcai-launch power restore              undo a cap left by a killed run
      hpcai-launch report results/            tables, plots and the best cap
      hpcai-launch plan results/ --mix mix.toml   which GPU to buy, which cap per partition
      hpcai-launch check results/RUN          the result's validity, check by check
      hpcai-launch resnet50 --slurm --nodes 2 a Slurm batch job across two nodes
      hpcai-launch resnet50 --slurm --nodes 2 --cap 200,300
                                              an in-run sweep as one job step
      hpcai-launch jobs                       submitted jobs and their state
      hpcai-launch selftest                   does hpcai measure this node correctly?
      hpcai-launch exec --cap 300 -- python solve.py   any command: time and energy
                                              to solution (docs/how-to/your-application.md)
    """
    if site_for_all is not None:  # the same selection as $HPCAI_SITE, for this process and its children
        import os

        os.environ["HPCAI_SITE"] = site_for_all


class BatchSize(click.ParamType):
    """A batch size per process, or "auto": the largest that runs a full step."""

    name = "N|auto"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int) and value >= 1:
            return value
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number < 1:
            self.fail(f"{value!r} is not a positive whole number or 'auto'", param, ctx)
        return number


_OPTION_TYPES = {"str": str, "int": int, "float": float}


def _workload_option(option):
    """A click option from a catalog Option (the catalog imports no click)."""
    if option.type == "flag":
        return click.option(option.flag, option.param, is_flag=True, default=None,
                            help=option.help)
    convert = _OPTION_TYPES[option.type]
    if option.choices:
        # Choices are offered as text and stored as the option's type (an int stays an int).
        return click.option(option.flag, option.param, type=click.Choice([str(c) for c in option.choices]),
                            default=None, help=option.help,
                            callback=lambda ctx, param, value: None if value is None else convert(value))
    if option.min is not None:
        convert = (click.IntRange(min=int(option.min), min_open=option.min_open) if option.type == "int"
                   else click.FloatRange(min=option.min, min_open=option.min_open))
    return click.option(option.flag, option.param, type=convert, default=None, help=option.help)


def _vary_axes(workload) -> list[str]:
    from hpcai.launcher.sweep.grid import axes_for

    return list(axes_for(workload))


def _parse_vary(texts, workload) -> list:
    from hpcai.launcher.sweep.grid import parse_vary

    return parse_vary(texts, workload)


def _slurm_options(slurm, nodes, partition, account, time_limit, array, extra, gpus):
    """SlurmOptions with --slurm; its options without it are a mistake worth saying."""
    if not slurm:
        given = [name for name, value in (("--nodes", nodes), ("--partition", partition),
                                          ("--account", account), ("--time", time_limit),
                                          ("--array", array), ("--slurm-option", extra))
                 if value]
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply with --slurm")
        return None
    from hpcai.launcher.slurm.job import SlurmOptions

    return SlurmOptions(nodes=nodes or 1, partition=partition, account=account,
                        time=time_limit, gpus_per_node=gpus, array=array,
                        extra_options=list(extra))


from hpcai.launcher.cli.data_cli import data_options  # noqa: E402 (click options only)


def _choice_options(workload) -> list:
    """Which preset and implementation."""
    presets = list(workload.presets)
    return [
    click.option("--preset", type=click.Choice(presets),
                 help=f"default: {workload.gpu_default_preset} on GPUs, "
                      f"{workload.cpu_default_preset} on CPU"),
    click.option("--impl", type=click.Choice(list(workload.impls)),
                 help=f"implementation (default: {workload.default_impl})"),
    ]


def _sweep_options(workload) -> list:
    """Caps, clocks, repeats and grids: what makes a run a sweep."""
    return [
    click.option("--cap", "caps", type=Caps(),
                 help="power cap per GPU in watts, restored after each run; a list "
                      "(200,300,400) or range (200:700:100) runs a sweep"),
    click.option("--sm-clock", "sm_clocks", type=Clocks("--sm-clock"),
                 help="highest SM (graphics) clock per GPU in MHz, restored after each "
                      "run (NVIDIA: locked clocks, AMD: the sclk limit; root); a list or "
                      "range runs a sweep, with --cap a grid; checked against each GPU's "
                      "supported clocks (hpcai-launch power clocks)"),
    click.option("--mem-clock", "mem_clocks", type=Clocks("--mem-clock"),
                 help="highest memory clock per GPU in MHz, as --sm-clock"),
    click.option("--power-profile", "power_profiles", type=PowerProfiles(),
                 help="workload power profile(s) for every GPU, restored after each run (root): "
                      "NVIDIA's NVML profiles (max-p, max-q, compute, memory-bound, ...), AMD's "
                      "performance determinism as determinism-MHZ; a list runs one per profile, "
                      "with --cap/--sm-clock a grid (hpcai-launch power profiles lists them)"),
    click.option("--repeat", type=Repeats(), default=1, show_default=True,
                 help="runs per cap (a sweep when above 1)"),
    click.option("--vary", multiple=True, metavar="PARAM=V1,V2,...",
                 help="a grid sweep over PARAM (repeatable: every combination, with every "
                      "--cap and --repeat): " + ", ".join(_vary_axes(workload))
                      + "; gpus on a CPU run: its processes; nodes: with --slurm"),
    click.option("--scaling", type=click.Choice(["strong", "weak"]),
                 help="--vary nodes: strong keeps the global batch of the fewest nodes "
                      "(the batch per GPU shrinks), weak the batch per GPU (default)"),
    click.option("--seed", type=click.IntRange(min=0),
                 help="sweeps: seed of the shuffled cap order (default: random, recorded)"),
    click.option("--order", type=click.Choice(["shuffle", "alternate", "ascending"]),
                 default="shuffle", show_default=True,
                 help="sweeps: order of the caps in each round"),
    click.option("--idle-s", type=click.FloatRange(min=0, max=600), default=5.0,
                 show_default=True,
                 help="sweeps: seconds of idle power measured before the first run (0: skip)"),
    click.option("--in-run/--no-in-run", "in_run", default=None,
                 help="sweeps: one process measures every cap in turn (warm-up once, "
                      "a settle phase after each cap change); the default for sweeps "
                      "of the workloads that support it: the training workloads "
                      "(PyTorch, TensorFlow, LitGPT), and SGLang serving, where one "
                      "server runs and each cap's window is one load wave (one run of "
                      "the benchmark client); with --slurm one job step measures every "
                      "cap, one launcher per node (an --array job keeps one task per run)"),
    ]


def _window_and_power_options() -> list:
    """Adaptive windows, and how and where caps are set."""
    return [
    click.option("--ci-target", type=CiTarget(),
                 help="adaptive window: measure in blocks until the 95% confidence "
                      "half-width of throughput and energy per unit is within this share "
                      f"of the mean (default: {SWEEP_CI_TARGET:g} for sweeps, off for single runs, "
                      "which follow the preset's fixed epochs); 'off': fixed epochs"),
    click.option("--min-window-s", type=click.FloatRange(min=0),
                 help="adaptive window: measure at least this long (default: 30 s and "
                      "30 power samples; less for the tiny and short presets)"),
    click.option("--max-window-s", type=click.FloatRange(min=0, min_open=True),
                 help="adaptive window: stop after this long, met or not (default: 600 s)"),
    click.option("--settle-max-s", type=click.FloatRange(min=0, min_open=True),
                 help="sweeps: after each cap change, wait until power and temperature "
                      "are steady, but at most this long (default: 120 s; the tiny and "
                      "short presets' are seconds)"),
    click.option("--stall-timeout-s", type=click.FloatRange(min=0, min_open=True),
                 help="end the run as failed, every rank stopped, after this long without "
                      "a completed step (default: the preset's; 600 s for test presets, "
                      "1800 s for paper and fast ones)"),
    click.option("--power-method", type=click.Choice(POWER_METHODS),
                 help="how caps are set (default: the site's)"),
    click.option("--site", help="site name or .toml path (default: matched by hostname)"),
    click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
                 show_default=True, help="cuda covers ROCm GPUs too"),
    ]


def _run_options() -> list:
    """GPUs, processes, the protocol, the generic workload settings and outputs."""
    return [
    click.option("--gpus", type=int, help="number of GPUs (default: all)"),
    click.option("--nproc", type=int, help="CPU runs: processes (default: 2)"),
    click.option("--batch-size", type=BatchSize(),
                 help="per process; 'auto' searches: on GPUs the fastest of the largest that fits, half "
                      "and a quarter (the largest for paper presets), cached per GPU model"),
    click.option("--epochs", type=click.IntRange(min=1), help="measured epochs"),
    click.option("--warmup-epochs", type=click.IntRange(min=0), help="discarded epochs"),
    click.option("--steps-per-epoch", type=click.IntRange(min=1),
                 help="training steps (serving: requests) per epoch; default: the preset's"),
    click.option("--precision", type=click.Choice(PRECISIONS),
                 help="default: the preset's (auto: bf16-mixed where supported); "
                      "32-true: fp32 weights, TF32 math on NVIDIA (the paper's vision "
                      "setting); bf16-true: bf16 weights and optimizer (LitGPT)"),
    click.option("--channels-last/--no-channels-last", default=None,
                 help="memory format (default: on)"),
    click.option("--compile/--no-compile", "compile_", default=None,
                 help="torch.compile the model"),
    click.option("--sample-interval-ms", type=click.FloatRange(min=10, max=10000),
                 help="telemetry interval (default: 100)"),
    click.option("--no-telemetry", is_flag=True, help="do not sample power (for overhead tests)"),
    click.option("--output", "-o", help="results folder (default: the site's, ./results)"),
    click.option("--journal", help="power journal path (default: ~/.local/state/hpcai)"),
    click.option("--wait-for-gpus", "wait_for_gpus", type=click.FloatRange(min=0, max=7 * 86400),
                 default=0.0, help="seconds to wait while another run holds these GPUs' limits "
                                   "(default 0: refuse at once, naming the holder)"),
    click.option("--runtime", type=click.Choice(["auto", "host", "apptainer"]), default="auto",
                 show_default=True,
                 help="auto: apptainer when it is installed and the image is in the images "
                      "folder, else this Python"),
    click.option("--image", type=click.Path(dir_okay=False),
                 help="apptainer: this SIF instead of the images folder's"),
    click.option("--dry-run", is_flag=True,
                 help="print the plan: runs, caps, order, the wall time the protocol allows, the "
                      "command (with --slurm: the batch script); run nothing"),
    click.option("--json", "json_plan", is_flag=True,
                 help="with --dry-run: the plan as JSON (the run spec, or the sweep's runs)"),
    ]


def _slurm_decorators() -> list:
    """Submitting as a Slurm batch job."""
    return [
    click.option("--slurm", is_flag=True,
                 help="submit as a Slurm batch job (one launcher per node) and print its id"),
    click.option("--nodes", type=click.IntRange(min=1),
                 help="--slurm: nodes, one task each (default: 1)"),
    click.option("--partition", help="--slurm: partition (default: the site's)"),
    click.option("--account", help="--slurm: account (default: the site's)"),
    click.option("--time", "time_limit", help="--slurm: time limit, e.g. 01:00:00 "
                                              "(default: the site's)"),
    click.option("--array", is_flag=True,
                 help="--slurm sweeps: a job array, one run per task (default: one "
                      "allocation that runs them in turn)"),
    click.option("--slurm-option", "slurm_options", multiple=True,
                 help="--slurm: an extra sbatch option, e.g. --slurm-option=--exclusive "
                      "(repeatable)"),
    ]


def _sweep_of(repeat, axes, caps, sm_clocks, mem_clocks, profiles=None) -> bool:
    """One cap (clock, profile) and one repeat is a plain run, exactly as without sweeps."""
    return repeat > 1 or bool(axes) or any(v is not None and len(v) > 1
                                           for v in (caps, sm_clocks, mem_clocks, profiles))


def _check_combinations(v: dict, batch) -> None:
    """Options that cannot go together, refused before anything runs."""
    if batch is not None and any(c is not None and len(c) > 1 for c in (v["sm_clocks"], v["mem_clocks"])):
        raise click.UsageError("clock sweeps are not submitted to Slurm yet: give one "
                               "--sm-clock/--mem-clock per job")
    if batch is not None and v["power_profiles"] is not None and len(v["power_profiles"]) > 1:
        raise click.UsageError("power profile sweeps are not submitted to Slurm yet: give one "
                               "--power-profile per job")
    if v["json_plan"] and not v["dry_run"]:
        raise click.UsageError("--json goes with --dry-run (the plan as JSON): add --dry-run, or drop --json")
    low, high = v["min_window_s"], v["max_window_s"]
    if low is not None and high is not None and high < low:
        raise click.UsageError(f"--max-window-s {high:g} is shorter than "
                               f"--min-window-s {low:g}: give a maximum at least "
                               "as long as the minimum")


# The command's own options, by parameter name; every other value is the
# workload's (its params fields' options, --data).
_COMMAND_PARAMS = (
    "preset", "impl", "caps", "sm_clocks", "mem_clocks", "power_profiles", "repeat", "seed", "order", "idle_s",
    "power_method", "site", "device", "gpus", "nproc", "batch_size", "epochs", "warmup_epochs",
    "steps_per_epoch", "precision", "channels_last", "compile_", "sample_interval_ms",
    "no_telemetry", "output", "journal", "runtime", "image", "dry_run", "json_plan", "slurm", "nodes",
    "partition", "account", "time_limit", "array", "slurm_options", "vary", "scaling", "in_run",
    "ci_target", "min_window_s", "max_window_s", "settle_max_s", "wait_for_gpus", "stall_timeout_s")


def _run_options_of(workload, v: dict, extra: dict, axes, batch):
    """launcher.options.Options from the command's values."""
    from hpcai.launcher.run.options import Options

    caps, sm_clocks, mem_clocks = v["caps"], v["sm_clocks"], v["mem_clocks"]
    profiles = v["power_profiles"]
    sweep = _sweep_of(v["repeat"], axes, caps, sm_clocks, mem_clocks, profiles)
    interval_ms = v["sample_interval_ms"]
    return Options(
        workload=workload.name, impl=v["impl"], preset=v["preset"],
        cap_w=caps[0] if caps and not sweep else None,
        caps=(caps or [None]) if sweep else None, repeat=v["repeat"], seed=v["seed"],
        order=v["order"], idle_s=v["idle_s"], power_method=v["power_method"], site=v["site"],
        device=v["device"], gpus=v["gpus"], nproc=v["nproc"], output=v["output"],
        dry_run=v["dry_run"], dry_run_json=v["json_plan"], telemetry=not v["no_telemetry"],
        journal=v["journal"],
        runtime=v["runtime"], image=v["image"], slurm=batch, vary=axes or None,
        scaling=v["scaling"],
        sm_clock_mhz=sm_clocks[0] if sm_clocks and len(sm_clocks) == 1 else None,
        mem_clock_mhz=mem_clocks[0] if mem_clocks and len(mem_clocks) == 1 else None,
        sm_clocks=sm_clocks if sweep else None, mem_clocks=mem_clocks if sweep else None,
        power_profile=profiles[0] if profiles and not sweep else None,
        power_profiles=profiles if sweep and profiles else None,
        in_run=v["in_run"], wait_for_gpus_s=v["wait_for_gpus"],
        params={"batch_size": v["batch_size"], "precision": v["precision"],
                "channels_last": v["channels_last"], "compile": v["compile_"], **extra},
        protocol={"epochs": v["epochs"], "warmup_epochs": v["warmup_epochs"],
                  "steps_per_epoch": v["steps_per_epoch"],
                  "sample_interval_s": interval_ms / 1000 if interval_ms else None,
                  "ci_target": v["ci_target"], "min_window_s": v["min_window_s"],
                  "max_window_s": v["max_window_s"], "settle_max_s": v["settle_max_s"],
                  "stall_timeout_s": v["stall_timeout_s"]},
    )


def _run_workload(workload, values: dict):
    """What `hpcai-launch WORKLOAD ...` does: check the options, then launch."""
    from hpcai.launcher.cli.data_cli import resolve_data
    from hpcai.launcher.sweep.inrun_support import check_request
    from hpcai.launcher.run.launch import launch

    v = {k: values[k] for k in _COMMAND_PARAMS}
    extra = {k: value for k, value in values.items() if k not in v}
    # NaN/inf were refused as the options were read (finite_options.guard_floats).
    _run_guarded(resolve_data, workload, extra)
    axes = _run_guarded(_parse_vary, v["vary"], workload)
    batch = _slurm_options(v["slurm"], v["nodes"], v["partition"], v["account"], v["time_limit"],
                           v["array"], v["slurm_options"], v["gpus"])
    _check_combinations(v, batch)
    # (a sweep checks what else it varies when it starts: launcher/sweep/driver.py)
    _run_guarded(check_request, v["in_run"], v["caps"] if v["caps"] else None)
    opts = _run_options_of(workload, v, extra, axes, batch)
    if axes or v["scaling"]:
        from hpcai.launcher.sweep.grid import check

        _run_guarded(check, opts, axes, nodes_given=v["nodes"] is not None)
    return _run_guarded(launch, opts)


def _workload_decorators(workload) -> list:
    """Every option of `hpcai-launch WORKLOAD` (`exec` builds on them too)."""
    return [d for _, group in _workload_option_groups(workload) for d in group]


def _workload_option_groups(workload) -> list[tuple[str, list]]:
    """The options by the section of --help they are listed under."""
    return [("Preset and implementation", _choice_options(workload)),
            ("Caps, clocks and sweeps", _sweep_options(workload)),
            ("Measurement window and power", _window_and_power_options()),
            ("Run", _run_options()), ("Slurm", _slurm_decorators()),
            (f"{workload.name}'s own settings", [_workload_option(o) for o in workload.options]),
            ("Data from storage", data_options(workload))]


def _workload_command(workload):
    """`hpcai-launch WORKLOAD`: the generic options, then the workload's own (from
    its params fields) and its --data options."""
    def command(**values):
        return _run_workload(workload, values)

    from hpcai.launcher.cli.help_sections import SectionedCommand, section_names

    groups = _workload_option_groups(workload)
    for decorate in reversed([d for _, group in groups for d in group]):
        command = decorate(command)
    help_text = (f"{workload.summary}.\n\nPresets: " + ", ".join(
        f"{p.name} ({p.kind_label()})" for p in workload.presets.values()) + ".")
    made = main.command(name=workload.name, help=help_text, cls=SectionedCommand)(command)
    made.sections = [(title, section_names(group)) for title, group in groups]
    return made


for _w in WORKLOADS.values():
    _workload_command(_w)


@main.command(name="list")
def list_workloads():
    """Workloads and their presets: which is comparable to the seed paper, which is our best."""
    click.echo("Presets: paper = the seed paper's workload (RRZE-HPC/hpc-ai-perf-bench), the only "
               "one compared with its tables, or the reference it names; fast = hpcai's best "
               "configuration (default on GPUs).")
    for workload in WORKLOADS.values():
        click.echo(f"{workload.name}  ({workload.unit}/s)  {workload.summary}")
        for preset in workload.presets.values():
            proto = preset.protocol
            click.echo(f"  {preset.name:<6} ({preset.kind_label()}) {preset.summary} "
                       f"[{proto['warmup_epochs']}+{proto['epochs']} epochs x "
                       f"{proto['steps_per_epoch']} steps, batch {preset.params['batch_size']}]")


@main.command()
@click.option("--site", help="site name or .toml path")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def info(site, as_json):
    """Detected vendor, GPUs, runtime, power method, cap permission and site."""
    from hpcai.launcher.cli.info import show_info

    _run_guarded(show_info, site, as_json)


@main.group()
def power():
    """Show power limits and clocks, or restore them after a killed run."""


@power.command(name="show")
@click.option("--site", help="site name or .toml path")
@click.option("--power-method", type=click.Choice(POWER_METHODS))
def power_show(site, power_method):
    """Current, default, min and max power limit of every GPU."""
    from hpcai.launcher.cli.info import show_power

    _run_guarded(show_power, site, power_method)


@power.command(name="clocks")
@click.option("--site", help="site name or .toml path")
@click.option("--power-method", type=click.Choice(POWER_METHODS))
def power_clocks(site, power_method):
    """Each GPU's SM and memory clock now, and the clocks --sm-clock/--mem-clock accept."""
    from hpcai.launcher.cli.info import show_clocks

    _run_guarded(show_clocks, site, power_method)


@power.command(name="profiles")
@click.option("--site", help="site name or .toml path")
@click.option("--power-method", type=click.Choice(POWER_METHODS))
def power_profiles(site, power_method):
    """Each GPU's workload power profiles: offered, requested, enforced (--power-profile)."""
    from hpcai.launcher.cli.info import show_profiles

    _run_guarded(show_profiles, site, power_method)


@power.command(name="restore")
@click.option("--site", help="site name or .toml path")
@click.option("--power-method", type=click.Choice(POWER_METHODS))
@click.option("--journal", help="journal path (default: this host's in ~/.local/state/hpcai)")
@click.option("--force", is_flag=True,
              help="stop the killed run's workload first if it still runs (SIGTERM, then "
                   "SIGKILL), and restore even if its launcher still runs")
def power_restore(site, power_method, journal, force):
    """Put back the limits and clocks recorded by a launcher that was killed.

    Refuses while the killed run's workload still runs on the GPUs (a cap
    lifted under it would mislabel its result), unless --force.
    """
    from hpcai.launcher.cli.info import restore_power

    _run_guarded(restore_power, site, power_method, journal, force)


@main.command()
@click.argument("results", nargs=-1, required=True)  # paths, bundles, oras:// references
@click.option("--output", "-o", default="report", show_default=True,
              help="folder for report.md/.html/.json, the CSV files and plots/")
@click.option("--node-overhead-w", type=click.FloatRange(min=0),
              help="node overhead in efficiency (default: each result's, 100 W per node)")
@click.option("--max-slowdown", type=click.FloatRange(min=0, max=1, max_open=True),
              default=0.10, show_default=True,
              help="recommend the least-energy cap within this fraction of the best throughput")
@click.option("--work", type=click.FloatRange(min=0, min_open=True),
              help="units of work for energy x time (default: 1e6 images or samples, 1e9 tokens)")
@click.option("--noisy-cv", type=click.FloatRange(min=0, min_open=True), default=0.05,
              show_default=True, help="flag cells whose coefficient of variation exceeds this")
@click.option("--reference/--no-reference", default=False,
              help="overlay the seed paper's published throughput")
@click.option("--reference-file", type=click.Path(exists=True, dir_okay=False),
              help="another reference CSV (same columns); implies --reference")
@click.option("--power-run", help="run id whose power time series is plotted "
                                  "(default: the most efficient run)")
@click.option("--title", default="hpcai report", show_default=True)
@click.option("--combine-runs", is_flag=True,
              help="take independent runs of one configuration and cap as repeats "
                   "(default: only the runs of one sweep are)")
@click.option("--objective", type=click.Choice(["energy", "cost", "co2", "edp"]), default="energy",
              show_default=True, help="what picks the recommended cap: least energy, facility cost "
                                      "or CO2 (site [facility]) within --max-slowdown, or least "
                                      "energy x time")
@click.option("--energy-price", type=float, help="price per kWh, over what each result's site "
              "recorded (price_per_kwh); prices are given at report time, never by measuring again")
@click.option("--pue", type=float, help="the facility's PUE (>= 1), over what the results recorded")
@click.option("--carbon-intensity", type=float, help="g CO2e per kWh, over what the results recorded")
@click.option("--currency", help="the price's ISO 4217 code (e.g. EUR), over what the results recorded")
@click.option("--mix", type=click.Path(dir_okay=False), help="a job mix (as `plan --mix`): the plan "
              "for it is written under plan/ and what to buy and which cap to set head the report")
@click.option("--prices", type=click.Path(dir_okay=False),
              help="with --mix: the plan's prices file (as `plan --prices`); --energy-price etc. override it")
def report(results, output, node_overhead_w, max_slowdown, work, noisy_cv, reference,
           reference_file, power_run, title, combine_runs, objective, energy_price, pue,
           carbon_intensity, currency, mix, prices):
    """Tables, efficiency, the best cap and plots from result files or folders.

    RESULTS are result.json files, run folders, sweep folders or results
    folders (searched recursively); several GPUs and sites may be mixed.
    Signed bundles (folders, .tar files, oras:// references) are verified
    against $HPCAI_SITE's trusted keys; each run's origin and verification is
    shown, and a failed bundle is never averaged in.
    """
    from hpcai.launcher.report import ReportOptions, build_report

    opts = ReportOptions(output=output, node_overhead_w=node_overhead_w,
                         max_slowdown=max_slowdown, work=work, noisy_cv=noisy_cv,
                         reference=reference or reference_file is not None,
                         reference_file=reference_file, power_run=power_run, title=title,
                         combine_runs=combine_runs, objective=objective,
                         energy_price=energy_price, pue=pue, carbon_intensity=carbon_intensity,
                         currency=currency, mix=mix, prices=prices)
    _run_guarded(build_report, list(results), opts)


@main.command()
@click.argument("results", nargs=-1, required=True)
def check(results):
    """Each result's validity checks: value, threshold and verdict per check.

    RESULTS are result.json files, run folders, sweep folders or a results
    folder (every result.json under it), as `report` reads them. Exit status 1 when any
    result failed a check (the report leaves such a result out of every
    figure); a file that is not an hpcai result is an error. The thresholds
    are in the documentation (docs/reference/validity-thresholds.md).
    """
    from hpcai.launcher.cli.check import check_results

    code = _run_guarded(check_results, list(results))
    sys.exit(code or 0)


@main.command()
@click.argument("job_ids", nargs=-1)
@click.option("--output", "-o", help="results folder the jobs were submitted to "
                                     "(default: the site's, ./results)")
@click.option("--site", help="site name or .toml path (for its results folder)")
@click.option("--wait", is_flag=True, help="wait until the jobs end; non-zero if one did not "
                                           "complete")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0),
              help="--wait: give up after this many seconds")
def jobs(job_ids, output, site, wait, timeout_s):
    """Slurm jobs submitted with --slurm, and the state of each.

    JOB_IDS narrows the list. A job's folder holds its batch script, Slurm's
    log, and every run's node results and aggregate.
    """
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.slurm.jobs import show

    def run():
        results = output or sites.load(site)["paths"]["results"]
        return show(results, list(job_ids), wait, timeout_s)

    _run_guarded(run)


@main.command(name="slurm-node", hidden=True)
@click.argument("job_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--run", "run_index", type=click.IntRange(min=0))
@click.option("--in-run", "in_run", is_flag=True,
              help="every run of an in-run job, a segment each, in one process")
def slurm_node(job_dir, run_index, in_run):
    """Inside a job (srun, one task per node): this node's part of one run
    (--run N), or of every run of an in-run sweep (--in-run)."""
    if (run_index is None) == (not in_run):
        raise click.UsageError("give either --run N or --in-run")
    if in_run:
        from hpcai.launcher.slurm.inrun_node import run_node as run_in_run

        return _run_guarded(run_in_run, job_dir)
    from hpcai.launcher.slurm.node import run_node

    return _run_guarded(run_node, job_dir, run_index)


@main.command(name="slurm-aggregate", hidden=True)
@click.argument("job_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--run", "run_index", type=click.IntRange(min=0), required=True)
def slurm_aggregate(job_dir, run_index):
    """Inside a job, after a run's step: the run's aggregate.json."""
    from hpcai.launcher.slurm.aggregate import write

    return _run_guarded(write, job_dir, run_index)


from hpcai.launcher.cli.site_cli import site as _site_group  # noqa: E402 (after main exists)

main.add_command(_site_group)
from hpcai.launcher.images.cli import images as _images_group  # noqa: E402

main.add_command(_images_group)
from hpcai.launcher.cli.data_cli import data as _data_group  # noqa: E402
from hpcai.launcher.selftest import selftest_command  # noqa: E402

main.add_command(_data_group)
from hpcai.launcher.cli.results_cli import results as _results_group  # noqa: E402

main.add_command(_results_group)

main.add_command(selftest_command(_run_guarded))
from hpcai.launcher.cli.exec_cli import exec_command  # noqa: E402 (issue 30: any command)
from hpcai.workloads.catalog import COMMAND_WORKLOADS  # noqa: E402

main.add_command(exec_command(COMMAND_WORKLOADS["exec"], _workload_decorators(COMMAND_WORKLOADS["exec"]),
                              _run_workload))
from hpcai.launcher.fleet.cli import fleet as _fleet_group  # noqa: E402

main.add_command(_fleet_group, name="fleet")
from hpcai.launcher.planner.cli import plan_command  # noqa: E402 (issue 42: the centre's plan)

main.add_command(plan_command)
from hpcai.launcher.metrics.cli import metrics as _metrics_group  # noqa: E402 (issue 44: live metrics)

main.add_command(_metrics_group)
from hpcai.launcher.slurm.cli import slurm as _slurm_group  # noqa: E402 (issue 42: the mix from sacct)

main.add_command(_slurm_group)


if __name__ == "__main__":
    main()
