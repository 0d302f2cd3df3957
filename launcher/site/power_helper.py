"""`site check`'s look at a sudo power helper's set-up (docs/how-to/power-helper.md):
the sudoers rule that lets a user run it without a password, and for hpcai's own
helper its settings file and the Slurm epilog line that puts limits back.

Each reports through `site check`'s report(level, what, detail)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from hpcai.launcher.power.helper import EPILOG_LINE, SUDOERS_LINE

OK, WARN, FAIL = "ok", "warn", "FAIL"
HELPER_NAME = "hpcai-power-helper"
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
SUDO_TIMEOUT_S = 10
HOW_TO = "see docs/how-to/power-helper.md"


def check_helper_setup(sudo_argv: list[str] | None, helper: str | None, report) -> None:
    """sudo_argv: the command's argv when it runs through sudo; helper: the program it runs."""
    if sudo_argv is not None and helper and shutil.which(sudo_argv[0]):
        check_sudoers(sudo_argv[0], helper, report)
    if helper and os.path.basename(helper) == HELPER_NAME:
        config = check_helper_config(report)
        if config is not None:
            check_epilog(Path(config.get("slurm_conf") or DEFAULT_SLURM_CONF), report)


def check_sudoers(sudo: str, helper: str, report) -> None:
    """`sudo -n -l HELPER`: exit 0 when this user may run it without a password (sudo(8))."""
    try:
        done = subprocess.run([sudo, "-n", "-l", helper], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=SUDO_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        report(FAIL, "power.sudoers", f"cannot ask sudo about {helper}: {exc}")
        return
    if done.returncode == 0:
        report(OK, "power.sudoers", f"sudo lets this user run {helper} without a password")
    else:
        why = (done.stderr.strip().splitlines() or ["not allowed"])[-1]
        report(FAIL, "power.sudoers", f"sudo -n -l {helper}: {why}: add the rule "
                                      f"`{SUDOERS_LINE.format(helper=helper)}` ({HOW_TO})")


def check_helper_config(report) -> dict | None:
    """The helper's root-owned settings, as the helper itself reads them."""
    from hpcai.errors import HpcaiError
    from hpcai.launcher.power import helper

    path = helper.HELPER_CONFIG
    try:
        config = helper.load_config(path)
    except HpcaiError as exc:
        report(FAIL, "power.helper_config", exc.one_line())
        return None
    if not path.exists():
        report(WARN, "power.helper_config", f"{path} is absent: the helper allows any cap in the GPU's "
                                            f"own range, and asks the default Slurm config ({HOW_TO})")
    else:
        allowed = config.get("allowed_cap_range_w")
        report(OK, "power.helper_config", f"{path}: allowed caps "
                                          + (f"{allowed[0]:g}-{allowed[1]:g} W" if allowed else "the GPU's own range"))
    return config


def epilog_paths(slurm_conf: Path) -> list[Path]:
    """The Epilog= scripts a slurm.conf names (slurm.conf(5): the key is case-insensitive)."""
    paths = []
    for line in slurm_conf.read_text(errors="replace").splitlines():
        match = re.match(r"\s*epilog\s*=\s*(\S+)", line.split("#", 1)[0], re.IGNORECASE)
        if match:
            paths += [Path(p) for p in match.group(1).split(",")]
    return paths


def check_epilog(slurm_conf: Path, report) -> None:
    """An epilog that runs `hpcai-power-helper restore`, so a job's limits come back."""
    what = "power.epilog"
    if not slurm_conf.is_file():
        report(WARN, what, f"no Slurm config at {slurm_conf}: the epilog that puts limits back "
                           "could not be checked")
        return
    scripts = epilog_paths(slurm_conf)
    if not scripts:
        report(FAIL, what, f"{slurm_conf} names no Epilog=: nothing puts a job's limits back; add one "
                           f"running `{EPILOG_LINE.format(helper=HELPER_NAME)}` ({HOW_TO})")
        return
    restoring = [p for p in scripts if p.is_file() and re.search(
        rf"{HELPER_NAME}\s+restore\s+--job", p.read_text(errors="replace"))]
    if restoring:
        report(OK, what, f"{restoring[0]} runs {HELPER_NAME} restore")
    else:
        report(FAIL, what, f"no epilog of {slurm_conf} ({', '.join(map(str, scripts))}) runs "
                           f"`{EPILOG_LINE.format(helper=HELPER_NAME)}`: add that line ({HOW_TO})")
