"""`hpcai-launch data make` and the `--data DIR` / `--data-workers N` options of
workloads that read inputs from storage (workloads/datasets.py)."""
from __future__ import annotations

from pathlib import Path

import click

from hpcai.workloads.catalog import WORKLOADS


def data_options(workload) -> list:
    """The options a workload with a data_format gets (none for the others)."""
    if workload.data_format is None:
        return []
    what = "JPEG class folders" if workload.data_format == "jpeg" else "NumPy shards"
    return [
        click.option("--data", "data", type=click.Path(file_okay=False),
                     help=f"read training inputs from this dataset ({what} written by "
                          f"`hpcai-launch data make {workload.name}`) through a DataLoader, "
                          "and record the time waiting for data (default: synthetic inputs "
                          "preloaded on the device)"),
        click.option("--data-workers", "data_workers", type=click.IntRange(min=0),
                     help="--data: DataLoader worker processes per rank (default: the cores "
                          "per rank, at most 8; 0: load in the training process)"),
    ]


def resolve_data(workload, params: dict) -> None:
    """--data checked on the launcher (manifest whole, this workload's) and made
    absolute, so the container binds it read-only at the same path."""
    if workload.data_format is None:
        return
    from hpcai.errors import UsageError
    from hpcai.workloads import datasets

    typed = workload.params.from_dict(params)
    folder = typed.data
    if folder is None:
        if typed.data_workers is not None:
            raise UsageError("--data-workers only applies with --data", "add --data DIR")
        return
    path = Path(folder).expanduser().absolute()
    datasets.load_manifest(path, workload.name)
    params["data"] = str(path)


@click.group()
def data():
    """Datasets on disk for `--data`: written in the workload's shape."""


@data.command(name="make")
@click.argument("workload", type=click.Choice(sorted(n for n, w in WORKLOADS.items()
                                                     if w.data_format)))
@click.option("--samples", type=click.IntRange(min=1), required=True,
              help="samples to write (more than the node's memory for an I/O-bound test)")
@click.option("--output", "-o", required=True, type=click.Path(),
              help="a new (or empty) folder")
@click.option("--preset", help="whose sample shape (default: the workload's GPU default)")
@click.option("--classes", type=click.IntRange(min=1), default=10, show_default=True,
              help="images: class folders (labels)")
@click.option("--cube", type=click.IntRange(min=1),
              help="volumes: the cube edge, as the run's --cube (default: the preset's)")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
def data_make(workload, samples, output, preset, classes, cube, seed):
    """Write a dataset of WORKLOAD's shape, with a manifest (count, bytes, checksum).

    JPEG files in class folders for image models, NumPy shards for volumes.
    Run a workload on it with `--data DIR`.
    """
    from hpcai.launcher.cli.guarded import run_guarded as _run_guarded

    def make():
        from hpcai.errors import UsageError
        from hpcai.workloads import datasets
        from hpcai.workloads.catalog import get_workload

        w = get_workload(workload)
        params = dict(w.preset(preset or w.gpu_default_preset).params)
        if cube is not None:
            if w.data_format != "npy":
                raise UsageError(f"--cube applies to volumes, not {w.name}'s images",
                                 "drop --cube")
            params["cube"] = cube
        num_classes = w.params.from_dict(params).num_classes if w.data_format == "jpeg" else None
        if num_classes is not None and classes > int(num_classes):
            raise UsageError(f"--classes {classes} is more than the model's "
                             f"{num_classes} classes", "use fewer --classes")
        manifest = datasets.make(w.name, w.data_format, params, samples, Path(output),
                                 classes=classes, seed=seed, log=datasets.log_stderr)
        click.echo(f"dataset {Path(output).absolute()}: {manifest['count']} {w.name} samples "
                   f"of shape {'x'.join(map(str, manifest['sample_shape']))}, "
                   f"{manifest['bytes'] / 1e6:.1f} MB in {manifest['files']} file(s); "
                   f"use it with `hpcai-launch {w.name} --data {output}`")
        return 0

    return _run_guarded(make)
