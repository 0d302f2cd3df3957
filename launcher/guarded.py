"""Every command's error handling: hpcai errors as one line and an exit status.
Shared by cli.py and its sub-command groups (site_cli, data_cli, images/cli),
which cli.py imports: a home below all of them keeps the imports one-way."""
from __future__ import annotations

import sys

import click

from hpcai.errors import HpcaiError, Interrupted


def run_guarded(fn, *args, **kwargs):
    """Turn hpcai errors into one line on stderr and a non-zero exit status."""
    try:
        return fn(*args, **kwargs)
    except Interrupted as exc:
        click.echo(f"hpcai-launch: {exc.one_line()}; power limits restored", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("hpcai-launch: interrupted; power limits restored", err=True)
        sys.exit(130)
    except HpcaiError as exc:
        click.echo(f"hpcai-launch: error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
