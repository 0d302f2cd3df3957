"""hpcai-job-receipt: the Slurm prolog's and epilog's receipt lines (as root).

    hpcai-job-receipt start --job "$SLURM_JOB_ID"     # Prolog
    hpcai-job-receipt end --job "$SLURM_JOB_ID"       # Epilog

Its settings are the power helper's root-owned file (launcher/power/helper.py:
slurm_conf for scontrol, site for the site file) or --site: the site file's
[receipts] spool, [node_power] and [[policy.default]]. Every problem is one line
on stderr and a non-zero exit; the documented prolog and epilog lines keep a
failed receipt from draining the node (docs/how-to/job-receipts.md).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hpcai.errors import ConfigError, HpcaiError, UsageError
from hpcai.launcher.power import helper
from hpcai.launcher.receipts import record, slurm


def site_settings(path: str | None, config: dict) -> dict:
    """The site file's raw sections (a root-owned file no one else can write), or {}."""
    path = path or config.get("site")
    if not path:
        return {}
    data = helper._trusted_file(Path(path), "site file")
    if data is None:
        raise ConfigError(f"the site file {path} does not exist", "give an existing --site file")
    try:
        return helper._toml().loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the site file {path} is not valid TOML: {exc}") from None


def main(argv: list[str] | None = None, config_path: Path = helper.HELPER_CONFIG) -> int:
    parser = argparse.ArgumentParser(prog="hpcai-job-receipt", description=__doc__.split("\n")[0])
    parser.add_argument("half", choices=("start", "end"), help="start: in the prolog; end: in the epilog")
    parser.add_argument("--job", required=True, help='the Slurm job id ("$SLURM_JOB_ID")')
    parser.add_argument("--site", help="the site file (default: the power helper settings' site)")
    args = parser.parse_args(argv)
    try:
        slurm.check_job_id(args.job)  # before anything is read or written
        if os.geteuid() != 0:
            raise UsageError("hpcai-job-receipt must run as root", "run it from Slurm's Prolog and Epilog")
        config = helper.load_config(config_path)
        site_raw = site_settings(args.site, config)
        print((record.start if args.half == "start" else record.end)(config, site_raw, args.job))
        return 0
    except HpcaiError as exc:
        print(f"hpcai-job-receipt: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
