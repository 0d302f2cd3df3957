"""The `--cap` option's type, shared by the workload commands (cli/hpcai_launch.py) and `fleet run`."""
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
        from hpcai.launcher.sweep.axes import parse_caps

        try:
            return parse_caps(value)
        except HpcaiError as exc:
            self.fail(exc.one_line(), param, ctx)


class Repeats(click.IntRange):
    """`--repeat`: at least 1, at most a sweep's MAX_SLOTS runs (launcher/sweep/axes.py), checked
    as the option is read (10**20 repeats would build a list until memory ran out)."""

    def __init__(self):
        super().__init__(min=1)

    def convert(self, value, param, ctx):
        from hpcai.launcher.sweep.axes import MAX_SLOTS

        number = super().convert(value, param, ctx)
        if number > MAX_SLOTS:
            self.fail(f"{number} is more than a sweep's {MAX_SLOTS} runs", param, ctx)
        return number
