"""`hpcai-launch WORKLOAD --help` in sections: a workload command has some sixty
options, which click lists as one block. Each group of decorators that makes them
(hpcai_launch.py's _workload_decorators) names a section; the help lists the options under
their section's title, in the groups' order, the rest (--help) last."""
from __future__ import annotations

import click


def section_names(decorators: list) -> list[str]:
    """The parameter names a group of click decorators makes (applied to a probe)."""
    def probe():
        return None

    for decorate in decorators:
        probe = decorate(probe)
    return [p.name for p in getattr(probe, "__click_params__", [])]


class SectionedCommand(click.Command):
    """A command whose --help lists its options under `sections`: [(title, [names])]."""

    sections: list = []

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        placed: set = set()
        for title, names in self.sections:
            rows = [records[n] for n in names if records.get(n)]
            placed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if name not in placed and record]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)
