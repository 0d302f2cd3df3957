"""The shipped example site calls only what hpcai ships, and `site check` looks at
what makes a sudo power helper work (issue 41, item 8): the helper's settings
file and the Slurm epilog that puts limits back (docs/how-to/power-helper.md)."""
from __future__ import annotations

import os
import shlex
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import fake_gpu_state as fgs

from hpcai.launcher.site import config as sites
from hpcai.launcher.cli.hpcai_launch import main
from hpcai.launcher.power import helper
from hpcai.launcher.site.power_helper import check_epilog, epilog_paths

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_shipped_site_s_power_command_runs_a_program_hpcai_ships():
    for path in sorted(sites.shipped_dir().glob("*.toml")):
        command = sites.load(str(path))["power"].get("command")
        if not command:
            continue
        argv = shlex.split(command)
        program = argv[argv.index("-n") + 1] if argv[0] == "sudo" else argv[0]
        assert os.path.basename(program) in SCRIPTS, (path.name, program)


def test_the_example_site_is_the_helper_s_documented_set_up():
    command = sites.load("example-4xh100-sudo")["power"]["command"]
    assert command == "sudo -n /opt/hpcai/bin/hpcai-power-helper {uuid} {watts}"
    text = (sites.shipped_dir() / "example-4xh100-sudo.toml").read_text()
    installed = "/opt/hpcai/bin/hpcai-power-helper"
    assert helper.SUDOERS_LINE.format(helper=installed) in text
    assert helper.EPILOG_LINE.format(helper=installed) in text


def _reports():
    lines = []
    return lines, lambda level, what, detail: lines.append((level, what, detail))


def test_the_epilog_that_runs_the_helper_s_restore_passes(tmp_path):
    epilog = tmp_path / "epilog.sh"
    epilog.write_text("#!/bin/sh\n" + helper.EPILOG_LINE.format(helper="/opt/hpcai/bin/hpcai-power-helper") + "\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=test\n# Epilog=/nowhere\nEPILOG={tmp_path / 'other.sh'},{epilog}\n")
    assert epilog_paths(conf) == [tmp_path / "other.sh", epilog]
    lines, report = _reports()
    check_epilog(conf, report)
    assert lines == [("ok", "power.epilog", f"{epilog} runs hpcai-power-helper restore")]


@pytest.mark.parametrize("conf_text,says", [
    ("ClusterName=test\n", "names no Epilog=: nothing puts a job's limits back"),
    ("Epilog={epilog}\n", "runs `hpcai-power-helper restore --job \"$SLURM_JOB_ID\"`: add that line"),
])
def test_an_epilog_that_does_not_restore_fails(tmp_path, conf_text, says):
    epilog = tmp_path / "epilog.sh"
    epilog.write_text("#!/bin/sh\nlogger job done\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text(conf_text.format(epilog=epilog))
    lines, report = _reports()
    check_epilog(conf, report)
    ((level, what, detail),) = lines
    assert (level, what) == ("FAIL", "power.epilog") and says in detail


def test_site_check_reads_the_helper_s_settings_and_its_slurm_epilog(tmp_path, monkeypatch):
    """The helper's own command line in the site file (no sudo): its settings file and
    the epilog of the Slurm config it names are checked as the helper reads them."""
    for name in ("HPCAI_SITE", "HPCAI_SITE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HPCAI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    program = tmp_path / "bin" / "hpcai-power-helper"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"Epilog={tmp_path / 'epilog.sh'}\n")
    (tmp_path / "epilog.sh").write_text(helper.EPILOG_LINE.format(helper=program) + "\n")
    settings = tmp_path / "power-helper.toml"
    settings.write_text(f'slurm_conf = "{conf}"\nallowed_cap_range_w = [250, 600]\n')
    monkeypatch.setattr(helper, "HELPER_CONFIG", settings)
    site = tmp_path / "h100.toml"
    site.write_text(f'name = "h100"\n[gpu]\nvendor = "nvidia"\n[power]\nmethod = "command"\n'
                    f'command = "{program} {{uuid}} {{watts}}"\n')
    done = CliRunner().invoke(main, ["site", "check", "--site", str(site)])
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    if os.geteuid() == 0:  # root owns the file: the helper would read it
        assert lines["ok    power.helper_config"].endswith(f"{settings}: allowed caps 250-600 W"), done.stdout
        assert f"ok    power.epilog: {tmp_path / 'epilog.sh'} runs hpcai-power-helper restore" in done.stdout
    else:  # the helper refuses settings a user could write, and so does the check
        assert "FAIL  power.helper_config: refusing the power helper settings" in done.stdout
