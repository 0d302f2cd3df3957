"""Site configs: schema, defaults, selection, the shipped examples, and the
`hpcai-launch site list|show|check` commands. GPUs, where a test needs them,
are the FAKE pynvml/amdsmi of tests/fakes."""
import json
import os
import socket
import sys

import pytest
from click.testing import CliRunner
from fakes import fake_gpu_state as fgs  # tests/ is on sys.path via conftest

from hpcai.errors import ConfigError
from hpcai.launcher.site import config as sites
from hpcai.launcher.cli.hpcai_launch import main

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_default_site_loads_with_its_defaults(monkeypatch):
    monkeypatch.delenv("HPCAI_SITE", raising=False)
    monkeypatch.delenv("HPCAI_SITE_DIR", raising=False)
    site = sites.load(None, hostname="laptop")
    assert site["name"] == "default"
    assert site["power"]["node_overhead_w"] == 100
    assert site["power"]["method"] == "auto"


def test_site_matched_by_hostname(tmp_path, monkeypatch):
    (tmp_path / "alps.toml").write_text(
        'name = "alps"\nhostnames = ["nid*"]\n[power]\nnode_overhead_w = 250\n')
    monkeypatch.setenv("HPCAI_SITE_DIR", str(tmp_path))
    monkeypatch.delenv("HPCAI_SITE", raising=False)
    assert sites.load(None, hostname="nid001234")["power"]["node_overhead_w"] == 250
    assert sites.load(None, hostname="login1")["name"] == "default"


@pytest.mark.parametrize("text,fragment", [
    ('name = "x"\n[power]\nmethod = "magic"\n', "power.method"),
    ('name = "x"\n[power]\nnode_overhead_w = "a lot"\n', "power.node_overhead_w"),
    ('name = "x"\ncolour = "blue"\n', "colour"),
    ('name = "x"\n[power]\nmethod = "command"\n', "command"),
    ('name = \n', "not valid TOML"),
])
def test_invalid_site_file_is_one_clear_error(tmp_path, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        sites.load(str(path))
    line = err.value.one_line()
    assert fragment in line and "\n" not in line


def test_unknown_site_name():
    with pytest.raises(ConfigError, match="unknown site 'nowhere'"):
        sites.load("nowhere")


# --- the full site contract: new sections, shipped examples, site commands ---

SHIPPED = sorted(sites.shipped_dir().glob("*.toml"))
EXAMPLES = [p for p in SHIPPED if p.stem != "default"]


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """No site or image variables from the caller; state and results under tmp."""
    for name in ("HPCAI_SITE", "HPCAI_SITE_DIR", "HPCAI_IMAGES_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HPCAI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_gpu(monkeypatch):
    """Neither GPU library imports, as on this CPU machine (and whatever a developer has)."""
    for name in ("pynvml", "amdsmi"):
        monkeypatch.setitem(sys.modules, name, None)


def write_site(folder, text, name="probe"):
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\n' + text)
    return path


def test_examples_are_shipped():
    assert {p.stem for p in EXAMPLES} >= {"example-4xh100-sudo", "example-8xmi300x"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_sites_validate(path):
    site = sites.parse(path)
    assert site["name"] == path.stem
    if path.stem != "default":
        assert "EXAMPLE" in site["description"]
        lo, hi = site["power"]["allowed_cap_range_w"]
        assert site["gpu"]["per_node"] > 0 and 0 < lo < hi
        assert site["images"]["registry"].startswith("oras://")
        assert site["scheduler"]["partition"] and site["scheduler"]["account"]
        assert all(site["binds"][k].startswith("/") for k in ("data", "models", "scratch"))


def test_example_sites_use_the_power_methods_they_describe():
    h100 = sites.load("example-4xh100-sudo")
    assert (h100["gpu"]["vendor"], h100["gpu"]["per_node"]) == ("nvidia", 4)
    assert h100["power"]["method"] == "command"
    assert "{uuid}" in h100["power"]["command"] and "{watts}" in h100["power"]["command"]
    mi300x = sites.load("example-8xmi300x")
    assert (mi300x["gpu"]["vendor"], mi300x["gpu"]["per_node"]) == ("amd", 8)
    assert mi300x["power"]["method"] == "amdsmi"
    assert mi300x["power"]["allowed_cap_range_w"][0] >= 400


@pytest.mark.parametrize("host", ["vm", "localhost", "login1", "gpu001", "nid001234", "node001",
                                  "h100-node-001", "mi300x-001", "jrc0001", socket.gethostname()])
def test_examples_are_not_selected_by_ordinary_hostnames(clean_env, host):
    site, reason = sites.select(None, hostname=host)
    assert site["name"] == "default" and reason.startswith("default")


def test_defaults_of_every_section(clean_env, tmp_path):
    site = sites.parse(write_site(tmp_path, ""))
    assert site["binds"] == {"data": "", "models": "", "scratch": ""}
    assert site["images"] == {"dir": "", "registry": "", "registry_https": True, "sign_key": "", "verify_key": "",
                              "build_binds": [], "build_args": {}, "mksquashfs_args": []}
    assert site["apptainer"] == {"executable": "apptainer", "options": [], "env": {},
                                 "forward_env": []}
    assert site["scheduler"] == {"kind": "slurm", "partition": "", "account": "", "time": "",
                                 "extra_options": []}
    assert site["power"]["node_overhead_w"] == 100 and site["power"]["cap_tolerance_frac"] == 0.05
    assert "per_node" not in site["gpu"] and "allowed_cap_range_w" not in site["power"]
    # The shipped default spells out the same values.
    default = sites.load("default")
    for section in ("gpu", "power", "paths", "binds", "images", "apptainer", "scheduler"):
        assert default[section] == site[section], section


def test_defaults_resolve_images_and_state_dirs(clean_env, monkeypatch):
    site = sites.load("default")
    assert sites.images_dir(site) == clean_env / "images"
    monkeypatch.setenv("HPCAI_IMAGES_DIR", "/srv/sif")
    assert str(sites.images_dir(site)) == "/srv/sif"
    assert str(sites.images_dir(sites.load("example-8xmi300x"))) == "/srv/sif"  # the variable wins
    assert sites.state_dir(site) == clean_env / "state"


def test_partial_sections_keep_the_other_defaults(tmp_path):
    site = sites.parse(write_site(tmp_path, '[apptainer]\nenv = { NCCL_DEBUG = "WARN" }\n'
                                            '[images]\nbuild_binds = ["/etc/ssl/certs:/mnt/certs:ro"]\n'))
    assert site["apptainer"]["executable"] == "apptainer"
    assert site["apptainer"]["env"] == {"NCCL_DEBUG": "WARN"}
    assert site["images"]["registry"] == "" and site["images"]["build_binds"] == ["/etc/ssl/certs:/mnt/certs:ro"]


@pytest.mark.parametrize("text", [
    '[images]\nbuild_binds = ["/a", "/a:/b", "/a:/b:ro", "certs:/mnt/certs:rw"]\n',
    '[images]\nregistry = "oras://registry.example.org/hpcai"\n',
    '[images]\nmksquashfs_args = ["-Xcompression-level", "1"]\n',
    '[images]\nregistry = "oras://127.0.0.1:5000/hpcai"\nregistry_https = false\n',
    '[scheduler]\ntime = "30"\n', '[scheduler]\ntime = "1:00:00"\n',
    '[scheduler]\ntime = "2-00"\n', '[scheduler]\ntime = "2-12:30:00"\n',
    '[scheduler]\nkind = "none"\n',
    '[apptainer]\nforward_env = ["NCCL_*", "SLURM_JOB_ID", "OMP_[A-Z]*"]\n',
    '[power]\nallowed_cap_range_w = [150.5, 700]\n',
    '[gpu]\nvendor = "amd"\n[power]\nmethod = "command"\ncommand = "/opt/cap {uuid} {microwatts}"\n',
])
def test_valid_values_are_accepted(tmp_path, text):
    sites.parse(write_site(tmp_path, text))


@pytest.mark.parametrize("text,fragments", [
    ('[binds]\ndata = "data"\n', ["binds.data", "absolute"]),
    ('[binds]\nscratch = 3\n', ["binds.scratch"]),
    ('[binds]\nhome = "/home"\n', ["binds", "'home' was unexpected"]),
    ('[images]\nregistry = "docker://hub/hpcai"\n', ["images.registry", "oras://"]),
    ('[images]\nregistry = "oras://"\n', ["images.registry", "oras://"]),
    ('[images]\ndir = ["/sif"]\n', ["images.dir"]),
    ('[images]\nsign_key = false\n', ["images.sign_key"]),
    ('[images]\nmksquashfs_args = ["-comp gzip"]\n', ["images.mksquashfs_args"]),
    ('[images]\nregistry_https = "no"\n', ["images.registry_https"]),
    ('[images]\nbuild_binds = "/etc/ssl/certs"\n', ["images.build_binds"]),
    ('[images]\nbuild_binds = ["/a:/b:ro:extra"]\n', ["images.build_binds.0", "SRC[:DST[:OPTS]]"]),
    ('[images]\nbuild_binds = ["/a:relative"]\n', ["images.build_binds.0", "SRC[:DST[:OPTS]]"]),
    ('[images]\nbuild_binds = ["/a,/b"]\n', ["images.build_binds.0"]),
    ('[images]\nbuild_args = { TORCH_VERSION = 2 }\n', ["images.build_args.TORCH_VERSION"]),
    ('[images]\nbuild_args = { "2X" = "a" }\n', ["images.build_args", "environment variable name"]),
    ('[images]\ntag = "latest"\n', ["images", "'tag' was unexpected"]),
    ('[apptainer]\nexecutable = ""\n', ["apptainer.executable"]),
    ('[apptainer]\noptions = "--nv"\n', ["apptainer.options"]),
    ('[apptainer]\nenv = { OMP_NUM_THREADS = 8 }\n', ["apptainer.env.OMP_NUM_THREADS"]),
    ('[apptainer]\nenv = { "A-B" = "x" }\n', ["apptainer.env", "environment variable name"]),
    ('[apptainer]\nforward_env = ["NCCL DEBUG"]\n', ["apptainer.forward_env.0"]),
    ('[scheduler]\nkind = "pbs"\n', ["scheduler.kind"]),
    ('[scheduler]\npartition = 3\n', ["scheduler.partition"]),
    ('[scheduler]\naccount = ["a"]\n', ["scheduler.account"]),
    ('[scheduler]\ntime = "two hours"\n', ["scheduler.time", "Slurm time limit"]),
    ('[scheduler]\nextra_options = "--exclusive"\n', ["scheduler.extra_options"]),
    ('[gpu]\nper_node = -1\n', ["gpu.per_node"]),
    ('[gpu]\nper_node = "4"\n', ["gpu.per_node"]),
    ('[power]\nallowed_cap_range_w = [700, 200]\n', ["power.allowed_cap_range_w", "low < high"]),
    ('[power]\nallowed_cap_range_w = [300, 300]\n', ["power.allowed_cap_range_w"]),
    ('[power]\nallowed_cap_range_w = [300]\n', ["power.allowed_cap_range_w"]),
    ('[power]\nnode_overhead_w = -5\n', ["power.node_overhead_w"]),
    ('[power]\nmethod = "command"\ncommand = "sudo -n /x {gpu} {watts}"\n', ["power.command", "{gpu}"]),
    ('[power]\nmethod = "command"\ncommand = "sudo \'unclosed"\n', ["power.command"]),
    ('[gpu]\nvendor = "amd"\n[power]\nmethod = "nvml"\n', ["power.method", "gpu.vendor"]),
    ('[gpu]\nvendor = "nvidia"\n[power]\nmethod = "amdsmi"\n', ["power.method", "gpu.vendor"]),
])
def test_invalid_new_fields_are_one_line_errors_naming_the_field(tmp_path, text, fragments):
    path = write_site(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        sites.parse(path)
    line = err.value.one_line()
    assert "\n" not in line and str(path) in line
    for fragment in fragments:
        assert fragment in line, line


def test_select_says_why(clean_env, tmp_path, monkeypatch):
    assert sites.select("example-8xmi300x")[1] == "--site example-8xmi300x"
    monkeypatch.setenv("HPCAI_SITE", "example-4xh100-sudo")
    site, reason = sites.select(None)
    assert site["name"] == "example-4xh100-sudo" and reason == "$HPCAI_SITE=example-4xh100-sudo"
    assert sites.select("default")[0]["name"] == "default"  # the flag wins over the variable
    monkeypatch.delenv("HPCAI_SITE")
    folder = tmp_path / "sites"
    folder.mkdir()
    write_site(folder, 'hostnames = ["login*", "nid*"]\n', name="alps")
    monkeypatch.setenv("HPCAI_SITE_DIR", str(folder))
    site, reason = sites.select(None, hostname="nid001")
    assert site["name"] == "alps" and reason == "hostname 'nid001' matches 'nid*'"
    assert sites.load(None, hostname="nid001") == site
    assert sites.select(None, hostname="laptop")[1] == "default: no site's hostname patterns match 'laptop'"


# --- site list / show / check through the CLI ---

def invoke(*args):
    return CliRunner().invoke(main, list(args))


def assert_one_line_error(result, *fragments):
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcai-launch: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_site_list_marks_this_hosts_site(clean_env, monkeypatch, tmp_path):
    done = invoke("site", "list")
    assert done.exit_code == 0, done.output
    assert "* default" in done.stdout
    for path in EXAMPLES:
        assert f"  {path.stem}  {path}" in done.stdout
    assert "example-h100-node-" in done.stdout and "EXAMPLE to copy" in done.stdout
    assert f"selects default ({sites.shipped_dir() / 'default.toml'})" in done.stdout

    folder = tmp_path / "sites"
    folder.mkdir()
    write_site(folder, 'hostnames = ["nid*"]\ndescription = "Alps"\n', name="alps")
    monkeypatch.setenv("HPCAI_SITE_DIR", str(folder))
    monkeypatch.setattr(socket, "gethostname", lambda: "nid000042")
    done = invoke("site", "list")
    assert done.exit_code == 0, done.output
    assert "* alps" in done.stdout and "  default" in done.stdout and "hostnames: nid*" in done.stdout
    assert "matches 'nid*'" in done.stdout


def test_site_list_reports_an_invalid_site_file(clean_env, monkeypatch, tmp_path):
    folder = tmp_path / "sites"
    folder.mkdir()
    write_site(folder, '[power]\nmethod = "magic"\n', name="broken")
    monkeypatch.setenv("HPCAI_SITE_DIR", str(folder))
    done = invoke("site", "list")
    assert "INVALID" in done.stdout and "power.method" in done.stdout
    assert_one_line_error(done, "power.method")  # hostname selection would fail on it too


@pytest.mark.parametrize("name", [p.stem for p in SHIPPED])
def test_site_show_is_the_merged_site_as_toml(clean_env, name):
    done = invoke("site", "show", "--site", name)
    assert done.exit_code == 0, done.output
    assert f"# selected by: --site {name}" in done.stdout
    shown = tomllib.loads(done.stdout)
    site = sites.load(name)
    assert shown == {k: v for k, v in site.items() if k != "path"}
    assert done.stdout.index("name =") < done.stdout.index("[gpu]")


def test_site_show_json_says_why(clean_env, monkeypatch):
    monkeypatch.setenv("HPCAI_SITE", "example-4xh100-sudo")
    done = invoke("site", "show", "--json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert doc["selected_by"] == "$HPCAI_SITE=example-4xh100-sudo"
    assert doc["path"].endswith("example-4xh100-sudo.toml")
    assert doc["site"]["power"]["allowed_cap_range_w"] == [200, 700]
    assert doc["resolved"]["images_dir"] == "/lustre/project/hpcai/images"
    monkeypatch.delenv("HPCAI_SITE")
    doc = json.loads(invoke("site", "show", "--json").stdout)
    assert doc["site"]["name"] == "default" and doc["selected_by"].startswith("default")
    assert doc["resolved"]["state_dir"] == str(clean_env / "state")


@pytest.mark.parametrize("command", ["show", "check"])
def test_unknown_or_invalid_site_is_one_line(clean_env, tmp_path, command):
    assert_one_line_error(invoke("site", command, "--site", "atlantis"), "unknown site 'atlantis'")
    bad = write_site(tmp_path, '[images]\nregistry = "docker://x"\n')
    assert_one_line_error(invoke("site", command, "--site", str(bad)), "images.registry", "oras://")


def check_lines(done) -> dict[str, str]:
    """{"gpu.vendor": "warn", ...} from `site check` output."""
    levels = {}
    for line in done.stdout.splitlines():
        level, _, rest = line.partition(" ")
        if level in ("ok", "warn", "FAIL"):
            levels[rest.strip().split(":")[0]] = level
    return levels


def test_site_check_default_on_a_gpu_less_machine(clean_env, no_gpu):
    done = invoke("site", "check")
    assert done.exit_code == 0, done.output
    levels = check_lines(done)
    assert levels["schema"] == "ok" and levels["gpu.vendor"] == "warn"
    assert levels["power.method"] == "warn"
    assert "FAIL" not in levels.values()
    assert {"gpu.per_node", "power.allowed_cap_range_w", "binds.data", "binds.models", "binds.scratch",
            "images.dir", "images.registry", "apptainer.executable", "paths.state_dir",
            "paths.results"} <= set(levels)
    assert done.stdout.strip().splitlines()[-1].endswith("0 FAIL")


def test_site_check_fails_where_the_site_needs_a_gpu_vendor(clean_env, no_gpu, tmp_path):
    path = write_site(tmp_path, '[gpu]\nvendor = "nvidia"\nper_node = 4\n')
    done = invoke("site", "check", "--site", str(path))
    levels = check_lines(done)
    assert levels["gpu.vendor"] == "FAIL" and levels["gpu.per_node"] == "warn"
    assert levels["power.method"] == "warn"  # auto: no GPU, no caps (the vendor line FAILs already)
    assert_one_line_error(done, "check(s) FAIL", "fix the lines marked FAIL")


def test_site_check_fails_on_a_missing_bind_folder(clean_env, no_gpu, tmp_path):
    (tmp_path / "models").mkdir()
    path = write_site(tmp_path, f'[binds]\ndata = "{tmp_path / "absent"}"\nmodels = "{tmp_path / "models"}"\n')
    done = invoke("site", "check", "--site", str(path))
    levels = check_lines(done)
    assert levels["binds.data"] == "FAIL" and levels["binds.models"] == "ok"
    assert levels["binds.scratch"] == "ok"
    assert f"{tmp_path / 'absent'} does not exist" in done.stdout
    assert_one_line_error(done, "1 check(s) FAIL")


def test_site_check_fails_on_a_missing_power_helper_or_key(clean_env, no_gpu, tmp_path):
    path = write_site(tmp_path, '[power]\nmethod = "command"\ncommand = "/nonexistent/cap {index} {watts}"\n'
                                f'[images]\nverify_key = "{tmp_path / "key.pub"}"\n')
    done = invoke("site", "check", "--site", str(path))
    levels = check_lines(done)
    assert levels["power.method"] == "FAIL" and levels["images.verify_key"] == "FAIL"
    assert_one_line_error(done, "2 check(s) FAIL")


def test_site_check_warns_without_apptainer(clean_env, no_gpu, tmp_path):
    path = write_site(tmp_path, '[apptainer]\nexecutable = "no-such-apptainer"\n')
    done = invoke("site", "check", "--site", str(path))
    assert done.exit_code == 0, done.output
    assert check_lines(done)["apptainer.executable"] == "warn"


def test_site_check_fails_on_an_unwritable_state_dir(clean_env, no_gpu, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = write_site(tmp_path, f'[paths]\nstate_dir = "{blocker / "state"}"\n')
    done = invoke("site", "check", "--site", str(path))
    assert check_lines(done)["paths.state_dir"] == "FAIL"
    assert_one_line_error(done, "1 check(s) FAIL")


def gpu_site(tmp_path, extra=""):
    """A site for the FAKE two-H100 node, with a helper script and bind folders that exist."""
    helper = tmp_path / "gpu-power-cap"
    helper.write_text("#!/bin/sh\nexit 0\n")
    helper.chmod(0o755)
    for name in ("data", "models", "scratch"):
        (tmp_path / name).mkdir()
    return write_site(tmp_path, (
        '[gpu]\nvendor = "nvidia"\nper_node = 2\n'
        f'[power]\nmethod = "command"\ncommand = "{helper} {{index}} {{watts}}"\n{extra}'
        f'[binds]\ndata = "{tmp_path / "data"}"\nmodels = "{tmp_path / "models"}"\n'
        f'scratch = "{tmp_path / "scratch"}"\n'), name="h100")


def test_site_check_on_a_gpu_node_matching_its_site(clean_env, tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    path = gpu_site(tmp_path, "allowed_cap_range_w = [250, 600]\n")
    done = invoke("site", "check", "--site", str(path))
    assert done.exit_code == 0, done.output
    levels = check_lines(done)
    for what in ("gpu.vendor", "gpu.per_node", "power.method", "power.allowed_cap_range_w",
                 "binds.data", "binds.models", "binds.scratch"):
        assert levels[what] == "ok", (what, done.stdout)
    assert "sees 2 GPU(s) (NVIDIA H100 80GB HBM3)" in done.stdout


@pytest.mark.parametrize("extra,what,level", [
    ("allowed_cap_range_w = [100, 150]\n", "power.allowed_cap_range_w", "FAIL"),
    ("allowed_cap_range_w = [150, 800]\n", "power.allowed_cap_range_w", "warn"),
])
def test_site_check_compares_the_cap_range_with_the_gpus(clean_env, tmp_path, monkeypatch, extra, what, level):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    done = invoke("site", "check", "--site", str(gpu_site(tmp_path, extra)))
    assert check_lines(done)[what] == level, done.stdout
    assert "200-700 W" in done.stdout
    assert (done.exit_code != 0) == (level == "FAIL")


def test_site_check_warns_on_a_different_gpu_count(clean_env, tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    done = invoke("site", "check", "--site", str(gpu_site(tmp_path)))
    assert done.exit_code == 0, done.output
    assert check_lines(done)["gpu.per_node"] == "warn" and "2 declared, 1 seen" in done.stdout


def test_site_check_fails_when_the_gpus_are_another_vendors(clean_env, tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))
    done = invoke("site", "check", "--site", "example-8xmi300x")
    levels = check_lines(done)
    assert levels["gpu.vendor"] == "FAIL" and levels["power.method"] == "FAIL"
    assert done.exit_code != 0


def test_sudo_target_skips_sudos_options():
    from hpcai.launcher.cli.site_cli import _sudo_target

    assert _sudo_target(["sudo", "-n", "/usr/local/sbin/cap", "{index}"]) == "/usr/local/sbin/cap"
    assert _sudo_target(["sudo", "-n", "-u", "root", "nvidia-smi", "-pl"]) == "nvidia-smi"
    assert _sudo_target(["sudo", "--", "helper"]) == "helper"
    assert _sudo_target(["sudo", "-n"]) is None


def test_site_check_in_a_subprocess_on_the_fake_node(fake_nvidia_node, tmp_path):
    """The installed entry point path (python -m hpcai.launcher.cli) sees the site group too."""
    path = gpu_site(tmp_path)
    done = fake_nvidia_node.launch("site", "check", "--site", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok    gpu.vendor: nvidia: the nvidia library sees 2 GPU(s)" in done.stdout
    assert os.path.basename(str(path)) in done.stdout
