import pytest

from hpcai.errors import ConfigError
from hpcai.launcher import sites


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
