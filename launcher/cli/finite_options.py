"""Numbers on the command line must be numbers: click's FloatRange lets "nan"
through every bound (each comparison with NaN is false) and "inf" through any
open-ended one, and they used to fail only after the cap was set (a traceback,
or a sweep.json left `running`). Checked before anything changes on the node:
every command's float options are Finite (guard_floats, applied in cli/hpcai_launch.py)."""
from __future__ import annotations

import math

import click


class Finite(click.ParamType):
    """A float option's own type (FLOAT, FloatRange), which must also give a finite
    number: "nan" passes every bound of click's ranges, "inf" any open-ended one."""

    def __init__(self, inner: click.ParamType):
        self.inner, self.name = inner, inner.name

    def convert(self, value, param, ctx):
        number = self.inner.convert(value, param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            flag = max(param.opts, key=len) if param is not None and param.opts else "a number"
            raise click.UsageError(f"{flag} is {number}, not a finite number: give {flag} a finite "
                                   "value (or leave it out for the default)", ctx)
        return number

    def get_metavar(self, *args, **kwargs):
        return self.inner.get_metavar(*args, **kwargs)

    def to_info_dict(self) -> dict:
        return self.inner.to_info_dict()

    def __repr__(self) -> str:
        return repr(self.inner)


def guard_floats(command: click.Command) -> click.Command:
    """Every float option of command (and of its subcommands) made Finite: the one
    place the rule is applied, for every command at once (launcher/cli/hpcai_launch.py)."""
    for param in command.params:
        if isinstance(param.type, click.types.FloatParamType):
            param.type = Finite(param.type)
    for sub in getattr(command, "commands", {}).values():
        guard_floats(sub)
    return command
