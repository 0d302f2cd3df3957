"""`hpcai-launch WORKLOAD --help` groups its options (issue 41, item 10): under
titled sections in a fixed order, each option once, none left in a bare list."""
from __future__ import annotations

from click.testing import CliRunner

from hpcai.launcher.cli.hpcai_launch import main

SECTIONS = ["Preset and implementation:", "Caps, clocks and sweeps:", "Measurement window and power:",
            "Run:", "Slurm:", "Data from storage:", "Other options:"]  # resnet50 has no settings of its own


def test_resnet50_help_lists_every_option_once_under_its_section():
    done = CliRunner().invoke(main, ["resnet50", "--help"], terminal_width=100)
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    titles = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert titles == SECTIONS
    assert "Options:" not in lines
    # A row starts "  --flag", "  -h, --help" or "  --in-run / --no-in-run".
    heads = [line.split("  ")[1].split(" [")[0].split(" ")[0].rstrip(",") for line in lines
             if line.startswith("  -") and not line.startswith("   ")]
    assert len(heads) == len(set(heads)), sorted(h for h in heads if heads.count(h) > 1)
    command = main.get_command(None, "resnet50")
    listed = {flag for line in lines if line.startswith("  -") for flag in line.split() if flag.startswith("-")}
    for param in command.params:
        assert any(opt in listed for opt in param.opts), param.opts

def test_an_option_sits_in_its_own_section():
    text = CliRunner().invoke(main, ["resnet50", "--help"], terminal_width=100).output
    sections = {}
    current = None
    for line in text.splitlines():
        if line in SECTIONS:
            current = line
        elif current and line.lstrip().startswith("--"):
            sections.setdefault(current, []).append(line.split()[0])
    assert "--cap" in sections["Caps, clocks and sweeps:"]
    assert "--slurm" in sections["Slurm:"] and "--nodes" in sections["Slurm:"]
    assert "--dry-run" in sections["Run:"] and "--json" in sections["Run:"]
    assert "--preset" in sections["Preset and implementation:"]
    assert text.split("Other options:")[1].split()[:2] == ["-h,", "--help"]
