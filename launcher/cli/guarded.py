"""Every command's error handling: hpcai errors as one line and an exit status.
Shared by cli/hpcai_launch.py and its sub-command groups (site_cli, data_cli, images/cli),
which hpcai_launch.py imports: a home below all of them keeps the imports one-way."""
from __future__ import annotations

import sys

import click

from hpcai.errors import HpcaiError, Interrupted


def _restored() -> str:
    """"; power limits restored" where this process set limits and put them back;
    nothing where it set none (an uncapped run, `report`, `info`)."""
    from hpcai.launcher.power.restoring import limits_restored

    return "; power limits restored" if limits_restored() else ""


def run_guarded(fn, *args, **kwargs):
    """Turn hpcai errors into one line on stderr and a non-zero exit status."""
    try:
        return fn(*args, **kwargs)
    except Interrupted as exc:
        click.echo(f"hpcai-launch: {exc.one_line()}{_restored()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo(f"hpcai-launch: interrupted{_restored()}", err=True)
        sys.exit(130)
    except HpcaiError as exc:
        click.echo(f"hpcai-launch: error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
