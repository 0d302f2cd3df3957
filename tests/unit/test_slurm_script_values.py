"""Control characters and quoting in the batch script (issue 25, section 3):
a newline in --account or in a site's extra sbatch options used to end the
#SBATCH line and put the rest in the script as a command."""
from __future__ import annotations

import subprocess

import pytest

from hpcai.errors import UsageError
from hpcai.launcher.run.options import Options
from hpcai.launcher.slurm.job import Job, SlurmOptions, new_job_doc
from hpcai.launcher.slurm.script import render
from hpcai.launcher.slurm.script_values import check_value, sbatch_word
from hpcai.launcher.slurm.submit import run_slots
from conftest import one_line_error


def make_job(tmp_path, slurm: SlurmOptions, command=("hpcai-launch", "x")) -> Job:
    opts = Options("resnet50", preset="tiny", caps=[200.0, 300.0], seed=3)
    runs, seed = run_slots(opts, slurm.nodes)
    return Job(tmp_path / "job", new_job_doc(opts, slurm, runs, list(command), seed))


def sbatch_reads(word: str) -> str:
    """The argument sbatch takes from one #SBATCH word: src/sbatch/opt.c
    _get_argument (Slurm 22.05): a backslash escapes the next character (inside
    quotes too), ' and " quote, an unquoted # ends the line, whitespace ends the word."""
    out, quote, escape = [], None, False
    for ch in word:
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
            continue
        elif quote:
            if ch == quote:
                quote = None
                continue
        elif ch in "'\"":
            quote = ch
            continue
        elif ch == "#":
            break
        elif ch.isspace():
            break
        out.append(ch)
    assert quote is None
    return "".join(out)


@pytest.mark.parametrize("field,value", [
    ("account", "proj\ntouch /tmp/hpcai-pwned"),
    ("partition", "gpu\r#SBATCH --uid=0"),
    ("time", "01:00:00\x1b[2J"),
])
def test_control_characters_in_an_option_are_refused(tmp_path, field, value):
    job = make_job(tmp_path, SlurmOptions(**{field: value}))
    with pytest.raises(UsageError, match=f"--{field} holds a control character") as refused:
        render(job)
    assert "\n" not in str(refused.value)


def test_control_characters_in_extra_options_and_the_command_are_refused(tmp_path):
    with pytest.raises(UsageError, match="extra_options"):
        render(make_job(tmp_path, SlurmOptions(extra_options=["--qos=a\nrm -rf ~"])))
    with pytest.raises(UsageError, match="the command line"):
        render(make_job(tmp_path, SlurmOptions(), ("hpcai-launch", "resnet50\nid")))
    assert check_value("x", "plain value, spaces ok") == "plain value, spaces ok"


def test_sbatch_options_are_quoted_so_sbatch_reads_them_back_whole(tmp_path):
    odd = ['--comment=two words # not a comment', '--comment=a"b\\c\'d', "--qos=normal"]
    for option in odd:
        assert sbatch_reads(sbatch_word(option)) == option
    assert sbatch_word("--qos=normal") == "--qos=normal"  # plain options stay as they were
    script = render(make_job(tmp_path, SlurmOptions(account="my project",
                                                   extra_options=odd)))
    assert '#SBATCH "--account=my project"\n' in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_a_newline_in_account_is_a_one_line_error_that_writes_nothing(cpu_node):
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "--dry-run",
                           "--account", "proj\ntouch /tmp/hpcai-pwned",
                           "-o", str(cpu_node.results))
    one_line_error(done, "--account holds a control character")
    assert done.stdout == ""  # no script printed
    assert not cpu_node.results.exists() or not any(cpu_node.results.iterdir())


def test_a_newline_in_the_site_extra_options_is_refused(cpu_node, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('name = "t"\n[scheduler]\nkind = "slurm"\n'
                    'extra_options = ["--qos=a\\nid > /tmp/hpcai-pwned"]\n')
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "--dry-run",
                           "--site", str(site), "-o", str(cpu_node.results))
    one_line_error(done, "extra_options")
    assert done.stdout == ""
