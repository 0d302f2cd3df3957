"""The `--cap` option's type, shared by the workload commands (cli.py) and `fleet run`."""
from __future__ import annotations

import click

from hpcai.errors import HpcaiError


class Caps(click.ParamType):
    """Watts per GPU: one cap, a list (200,300,400) or a range (200:700:100, stop
    included), as a sorted list; a one-line error otherwise."""

    name = "WATTS|LIST|START:STOP:STEP"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        from hpcai.launcher.sweep import parse_caps

        try:
            return parse_caps(value)
        except HpcaiError as exc:
            self.fail(exc.one_line(), param, ctx)
