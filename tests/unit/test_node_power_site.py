"""The site's [node_power] and [facility] sections: validated like the
others, and `site check` reports each node power source in one line."""
import pytest
from test_node_power import pm_tree, rapl_tree
from test_sites import assert_one_line_error, check_lines, clean_env, invoke, no_gpu, write_site  # noqa: F401

from hpcai.errors import ConfigError
from hpcai.launcher.site import config as sites


@pytest.mark.parametrize("text, where", [
    ('[node_power]\nsources = ["auto", "rapl"]\n', "node_power.sources"),
    ('[node_power]\nsources = ["snmp"]\n', "node_power.sources"),
    ('[node_power]\nsources = ["ipmi"]\n[node_power.ipmi]\nhost = "10.0.0.1"\n',
     "node_power.ipmi.credentials_file"),
    ('[node_power.ipmi]\ninterval_s = 0.1\n', "node_power.ipmi.interval_s"),
    ('[facility]\npue = 0.5\n', "facility.pue"),
    ('[facility]\ncurrency = "euro"\n', "facility.currency"),
])
def test_bad_node_power_and_facility_sections(tmp_path, text, where):
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        sites.parse(write_site(tmp_path, text))


def test_defaults_measure_no_node_power(tmp_path):
    site = sites.parse(write_site(tmp_path, ""))
    assert site["node_power"] == {"sources": []} and site["facility"] == {}


@pytest.mark.usefixtures("clean_env", "no_gpu")
def test_site_check_reports_each_node_source(tmp_path):
    pm = pm_tree(tmp_path / "pm", accels=1)
    rapl = rapl_tree(tmp_path / "powercap", packages=1)
    path = write_site(tmp_path, '[node_power]\nsources = ["rapl", "pm_counters"]\n'
                                f'[node_power.rapl]\nroot = "{rapl}"\n'
                                f'[node_power.pm_counters]\nroot = "{pm}"\n')
    done = invoke("site", "check", "--site", str(path))
    levels = check_lines(done)
    assert levels["node_power.rapl"] == "ok" and levels["node_power.pm_counters"] == "ok"
    assert "node (node), cpu (cpu_package), memory (dram), accel0 (accelerator)" in done.stdout


@pytest.mark.usefixtures("clean_env", "no_gpu")
def test_site_check_fails_a_named_source_that_is_absent(tmp_path):
    path = write_site(tmp_path, '[node_power]\nsources = ["pm_counters"]\n'
                                f'[node_power.pm_counters]\nroot = "{tmp_path / "none"}"\n')
    done = invoke("site", "check", "--site", str(path))
    assert check_lines(done)["node_power.pm_counters"] == "FAIL"
    assert "not an HPE Cray EX node" in done.stdout
    assert_one_line_error(done, "1 check(s) FAIL")
