"""The `hpcai-power-helper` command: a user's cap and the epilog's restore (helper.py),
and Slurm's Prolog=/Epilog= lines applying the site's policy (prolog.py).

A module of its own so that the helper and the prolog, which builds on the helper's
checks, need not import each other.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["prolog"], ["epilog"]):  # Slurm's Prolog=/Epilog= scripts: the site's policy
        from hpcai.launcher.power.prolog import main as prolog_main

        return prolog_main(argv)
    from hpcai.launcher.power.helper import main as helper_main

    return helper_main(argv)


if __name__ == "__main__":
    sys.exit(main())
