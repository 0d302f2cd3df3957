"""The job mix from sacct (launcher/slurm/mix.py): the parser, the GPU-hours and
the classes, on sacct text in the form the real one prints. The lines are
sacct 22.05's `--parsable2 --noheader --allocations --format JobID,JobName,
Account,QOS,Partition,AllocTRES,ElapsedRaw,State` output, as captured from
tools/slurm-ci with HPCAI_SLURM_CI_ACCOUNTING=1 (the first two), widened to
the typed GRES and array forms sacct's man page documents. The real cluster's
run is tests/integration/test_slurm_mix_sacct.py."""
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from hpcai.errors import SlurmError, UsageError
from hpcai.launcher.slurm import mix
from hpcai.launcher.slurm.cli import write_mix

CAPTURED = """\
1|llama-a|root|normal|ci|billing=1,cpu=1,gres/gpu=2,node=1|3|COMPLETED
2|resnet-b|root|normal|ci|billing=1,cpu=1,gres/gpu=1,node=1|2|COMPLETED
3|llama-b|ml-llm|normal|ci|billing=8,cpu=8,gres/gpu:h100=4,mem=64G,node=1|7200|TIMEOUT
4_1|hpcai-resnet50|ml-cv|high|ci|billing=4,cpu=4,gres/gpu=4,gres/gpu:h100=4,mem=32G,node=1|3600|COMPLETED
5|shell|physics|normal|ci|billing=2,cpu=2,gres/gpu=1,node=1|1800|CANCELLED by 0
6|cpu-only|physics|normal|ci|billing=2,cpu=2,node=1|9000|COMPLETED
7|llama-c|root|normal|ci||0|PENDING
"""
CLASSES = [
    {"name": "llm", "workload": "llama3-8b-pretrain", "job_name": "llama*"},
    {"name": "cv", "workload": "resnet50", "hpcai_workload": "resnet*"},
    {"name": "cv-by-name", "workload": "resnet50", "job_name": "resnet-*"},
]


def test_the_sacct_call_and_its_checked_options():
    assert mix.sacct_args("2026-11-01", "gpu") == [
        "--parsable2", "--noheader", "--allocations", "--allusers", "-S", "2026-11-01", "-E", "now",
        "-r", "gpu", "--format", "JobID,JobName,Account,QOS,Partition,AllocTRES,ElapsedRaw,State"]
    with pytest.raises(UsageError, match="--since 'last week' is not a date"):
        mix.sacct_args("last week", "gpu")
    with pytest.raises(UsageError, match="--partition 'gpu,debug' is not a partition name"):
        mix.sacct_args("2026-11-01", "gpu,debug")


@pytest.mark.parametrize("tres,gpus", [
    ("billing=1,cpu=1,gres/gpu=2,node=1", 2), ("cpu=8,gres/gpu:h100=4,mem=64G", 4),
    ("gres/gpu=4,gres/gpu:h100=4", 4), ("gres/gpu:a100=1,gres/gpu:h100=2", 3), ("cpu=2,node=1", 0), ("", 0)])
def test_gpus_of_alloc_tres(tres, gpus):
    assert mix.gpus_of(tres) == gpus


def test_gpu_hours_and_classes_from_captured_sacct_text():
    jobs = mix.parse_sacct(CAPTURED)
    assert [j["JobID"] for j in jobs] == ["1", "2", "3", "4_1", "5", "6", "7"]
    assert [j["gpu_hours"] for j in jobs] == [2 * 3 / 3600, 1 * 2 / 3600, 4.0 * 2, 4.0, 0.5, 0.0, 0.0]
    doc, tally = mix.mix_of(jobs, CLASSES, "ci")
    llm, cv, by_name = 6 / 3600 + 8.0, 4.0, 2 / 3600
    total = llm + cv + by_name
    assert doc["default_partition"] == "ci"
    assert [(c["name"], c["workload"], c["partition"]) for c in doc["class"]] == [
        ("llm", "llama3-8b-pretrain", "ci"), ("cv", "resnet50", "ci"), ("cv-by-name", "resnet50", "ci")]
    shares = {c["name"]: c["share"] for c in doc["class"]}
    assert shares["cv"] == round(cv / total, 4) and shares["cv-by-name"] == round(by_name / total, 4)
    assert abs(shares["llm"] - llm / total) < 1e-4 and abs(sum(shares.values()) - 1) < 1e-9
    assert tally[None] == [2, 0.5]  # "shell" and "cpu-only" matched no rule
    assert tally["llm"][0] == 3  # the pending one counts as a job with no GPU-hours


def test_the_mix_toml_reads_back_as_the_agreed_format(tmp_path):
    doc, tally = mix.mix_of(mix.parse_sacct(CAPTURED), CLASSES, "ci")
    text = mix.mix_toml(doc, tally, "2026-11-01")
    assert tomllib.loads(text) == doc
    assert "#   no class (matched no rule; left out): 2 job(s), 0.50 GPU-hours" in text
    assert "#   class llm: 3 job(s), 8.00 GPU-hours" in text


@pytest.mark.parametrize("text,message", [
    ("1|a|b|c|d|gres/gpu=1\n", "sacct line 1 has 6 fields, not 8"),
    ("1|a|b|c|d|gres/gpu=x|5|COMPLETED\n", "sacct line 1: unreadable AllocTRES or ElapsedRaw"),
])
def test_unreadable_sacct_output_is_one_line(text, message):
    with pytest.raises(SlurmError, match=message):
        mix.parse_sacct(text)


def test_no_classes_or_no_classified_hours_is_a_usage_error():
    jobs = mix.parse_sacct(CAPTURED)
    with pytest.raises(UsageError, match=r"the site file has no \[\[classes\]\] rules"):
        mix.mix_of(jobs, [], "ci")
    with pytest.raises(UsageError, match=r"no GPU-hours of partition ci in sacct match a \[\[classes\]\] rule "
                                         r"\(7 job\(s\) found\)"):
        mix.mix_of(jobs, [{"name": "x", "workload": "w", "account": "nobody"}], "ci")


def test_the_command_refuses_bad_options_before_asking_slurm(tmp_path, monkeypatch):
    def no_sacct(args):
        raise AssertionError("sacct must not run")

    monkeypatch.setattr("hpcai.launcher.slurm.commands.accounting", no_sacct)
    (tmp_path / "old.toml").write_text("kept")
    with pytest.raises(UsageError, match="already exists"):
        write_mix("2026-11-01", "ci", str(tmp_path / "old.toml"), None)
    assert (tmp_path / "old.toml").read_text() == "kept"
    with pytest.raises(UsageError, match="does not exist"):
        write_mix("2026-11-01", "ci", str(tmp_path / "no" / "mix.toml"), None)
    with pytest.raises(UsageError, match="is not a date"):
        write_mix("yesterday", "ci", str(tmp_path / "mix.toml"), None)
    assert not (tmp_path / "mix.toml").exists()


def test_without_sacct_on_path_the_mix_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(SlurmError) as err:
        mix.mix_from_sacct({"classes": CLASSES}, "2026-11-01", "ci")
    assert err.value.one_line() == ("`sacct` is not on PATH, and the mix comes from Slurm's accounting: "
                                    "run this on a login node of the cluster (or load its Slurm module)")
