"""The site file's [[classes]] rules and [policy] section (issue 42 §2,
launcher/site/policy.py): parsed and validated by the site
loader, matched to Slurm jobs, and shown by `hpcai-launch site check`.
GPUs, where a test needs them, are the FAKE pynvml of tests/fakes."""
import pytest
from fakes import fake_gpu_state as fgs
from test_sites import assert_one_line_error, check_lines, clean_env, gpu_site, invoke, no_gpu, write_site  # noqa: F401

from hpcai.errors import ConfigError
from hpcai.launcher.site import config as sites
from hpcai.launcher.site.policy import describe, job_class, setting_for

CLASSES = '''
[[classes]]
name = "llm"
workload = "llama3-8b-pretrain"
job_name = "llama*"
account = "ml-*"

[[classes]]
name = "cv"
workload = "resnet50"
qos = "normal"
'''
POLICY = '''
[policy]
plan = "sha256:abc"
made = "2026-11-27T22:00:00Z"

[[policy.default]]
partition = "gpu"
gpu = "H100"
cap_w = 450.0

[[policy.override]]
partition = "gpu"
gpu = "H100"
class = "llm"
cap_w = 600.0

[[policy.override]]
partition = "gpu"
gpu = "H100"
class = "cv"
sm_clock_mhz = 1410
'''
RANGE = '[power]\nallowed_cap_range_w = [200, 650]\n'


def load(tmp_path, text):
    return sites.load(str(write_site(tmp_path, text)))


def test_classes_and_policy_load_and_decide_a_jobs_setting(tmp_path):
    site = load(tmp_path, RANGE + CLASSES + POLICY)
    assert [c["name"] for c in site["classes"]] == ["llm", "cv"]
    llm_job = {"job_name": "llama-8b", "account": "ml-vision", "qos": "normal"}
    assert job_class(site["classes"], llm_job) == "llm"
    # All of a rule's globs must match: the wrong account falls through to the next rule.
    assert job_class(site["classes"], {**llm_job, "account": "physics"}) == "cv"
    assert job_class(site["classes"], {"job_name": "x", "account": "a", "qos": "high"}) is None
    # A rule naming a key the job lacks (hpcai_workload before an exec job runs) does not match.
    assert job_class([{"name": "w", "workload": "w", "hpcai_workload": "*"}], llm_job) is None

    assert setting_for(site, "gpu", "H100", "llm") == (
        {"cap_w": 600.0}, "the override for partition gpu on H100, class llm")
    assert setting_for(site, "gpu", "H100", "cv") == (
        {"sm_clock_mhz": 1410}, "the override for partition gpu on H100, class cv")
    assert setting_for(site, "gpu", "H100", None) == ({"cap_w": 450.0}, "the default for partition gpu on H100")
    assert setting_for(site, "gpu", "h100", "other") == ({"cap_w": 450.0}, "the default for partition gpu on H100")
    assert setting_for(site, "gpu", "MI300X", None) is None
    assert setting_for(site, "debug", "H100", "llm") is None
    assert describe(site) == ["default cap 450 W for partition gpu on H100",
                              "override cap 600 W for partition gpu on H100, class llm",
                              "override SM clock 1410 MHz for partition gpu on H100, class cv"]


def test_a_site_without_a_policy_has_none(tmp_path):
    site = load(tmp_path, "")
    assert describe(site) == [] and setting_for(site, "gpu", "H100", None) is None


DEFAULT = '[[policy.default]]\npartition = "gpu"\ngpu = "H100"\n'


@pytest.mark.parametrize("text,fragment", [
    (RANGE + f"[policy]\n{DEFAULT}cap_w = 700.0\n",
     "policy.default[0].cap_w: 700 W is outside power.allowed_cap_range_w 200-650 W"),
    (f"[policy]\n{DEFAULT}cap_w = nan\n", "policy.default[0].cap_w: nan is not a finite number"),
    (f"[policy]\n{DEFAULT}cap_w = inf\n", "policy.default[0].cap_w: inf is not a finite number"),
    (f"[policy]\n{DEFAULT}cap_w = -5.0\n", "policy.default.0.cap_w"),
    (f"[policy]\n{DEFAULT}cap_w = 400.0\n{DEFAULT}cap_w = 450.0\n",
     "policy.default[1]: a second entry for partition gpu on H100"),
    (f"[policy]\n{DEFAULT}\n", "'cap_w' is a required property"),
    (CLASSES + '[[policy.override]]\npartition = "gpu"\ngpu = "H100"\nclass = "llm"\ncap_w = 500.0\n'
     'power_profile = "compute"\n', "policy.override[0]: sets cap_w, power_profile"),
    (CLASSES + '[[policy.override]]\npartition = "gpu"\ngpu = "H100"\nclass = "llm"\n',
     "policy.override[0]: sets nothing"),
    (CLASSES + '[[policy.override]]\npartition = "gpu"\ngpu = "H100"\nclass = "hpc"\ncap_w = 500.0\n',
     "policy.override[0].class: 'hpc' is not a [[classes]] name"),
    (CLASSES + '[[classes]]\nname = "llm"\nworkload = "x"\n', "classes[2].name: 'llm' is given twice"),
    ('[[classes]]\nname = "a b"\nworkload = "x"\n', "'a b' must be letters, digits"),
    ('[[classes]]\nname = "a"\nworkload = "x"\npartition = "gpu"\n', "Additional properties"),
    ('[[classes]]\nname = "a"\n', "'workload' is a required property"),
])
def test_a_bad_class_or_policy_is_one_line(tmp_path, text, fragment):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, text)
    line = err.value.one_line()
    assert fragment in line and "\n" not in line, line


@pytest.mark.usefixtures("clean_env")
def test_a_bad_policy_exits_2_from_the_cli(tmp_path):
    path = write_site(tmp_path, RANGE + f"[policy]\n{DEFAULT}cap_w = 700.0\n")
    done = invoke("site", "check", "--site", str(path))
    assert done.exit_code == 2
    assert_one_line_error(done, "policy.default[0].cap_w: 700 W is outside power.allowed_cap_range_w")


@pytest.mark.usefixtures("clean_env", "no_gpu")
def test_site_check_shows_the_policy_in_force(tmp_path):
    done = invoke("site", "check", "--site", str(write_site(tmp_path, RANGE + CLASSES + POLICY)))
    assert done.exit_code == 0, done.output
    assert ("ok    policy.default[0]: default cap 450 W for partition gpu on H100; "
            "within power.allowed_cap_range_w 200-650 W") in done.stdout
    assert "ok    policy.override[1]: override SM clock 1410 MHz for partition gpu on H100, class cv\n" in done.stdout
    done = invoke("site", "check", "--site", str(write_site(tmp_path, "", name="bare")))
    assert "ok    policy: none: the Slurm prolog leaves each job's limits as they are" in done.stdout


@pytest.mark.usefixtures("clean_env")
def test_site_check_fails_a_cap_outside_this_nodes_gpus_range(tmp_path, monkeypatch):
    """The FAKE H100s' range is 200-700 W; without a site range the file itself is valid."""
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    path = gpu_site(tmp_path, f"[policy]\n{DEFAULT}cap_w = 800.0\n"
                              '[[policy.default]]\npartition = "gpu"\ngpu = "MI300X"\ncap_w = 800.0\n')
    done = invoke("site", "check", "--site", str(path))
    levels = check_lines(done)
    assert levels["policy.default[0]"] == "FAIL" and levels["policy.default[1]"] == "ok", done.stdout
    assert "outside this node's H100 range 200-700 W" in done.stdout
    assert_one_line_error(done, "1 check(s) FAIL")
