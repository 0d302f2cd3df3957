"""`hpcai-launch selftest` on a node of FAKE GPUs (tests/fakes pynvml) and on
a node without GPUs. The GPU load needs torch with a GPU, so these runs say
the load was not available; caps are set through a site command that stands
in for `sudo -n nvidia-smi -pl` and changes the fake node."""
from __future__ import annotations

import importlib.util
import json
import shlex
import sys

import pytest

from conftest import FAKES, FakeNode, one_line_error
from fakes import fake_gpu_state as fgs

FAST = ["--no-load", "--load-s", "1"]


def _site(tmp_path, node: FakeNode, method: str = "command"):
    helper = (f"{shlex.quote(sys.executable)} -c 'import sys; sys.path.insert(0, sys.argv[1]); "
              "import fake_gpu_state as f; f.update_device(sys.argv[2], int(sys.argv[3]), "
              f"current_limit_w=float(sys.argv[4]))' {shlex.quote(str(FAKES))} "
              f"{shlex.quote(str(node.state))} {{index}} {{watts}}")
    path = tmp_path / "site.toml"
    path.write_text(f'name = "selftest"\n[power]\nmethod = "{method}"\ncommand = "{helper}"\n'
                    .replace("\\", "\\\\"))
    return path


def _rows(doc, check):
    return {r["item"]: r for r in doc["checks"] if r["check"] == check}


def test_selftest_on_fake_gpus_measures_restores_and_writes_json(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(2, "nvidia"))
    out = tmp_path / "selftest.json"
    done = node.launch("selftest", *FAST, "--site", str(_site(tmp_path, node)),
                       "--workloads", "llama3-8b-inference", "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "hpcai.selftest" and doc["summary"]["FAIL"] == 0
    assert _rows(doc, "library")["GPU library"]["status"] == "ok"
    assert [r["status"] for r in _rows(doc, "gpus").values()] == ["ok", "ok"]
    power = _rows(doc, "power")
    assert power["GPU 0 fields"]["detail"] == {"instant": 650.0, "average": 650.0}
    assert power["GPU 0 idle"]["status"] == "ok"
    energy = power["GPU 1 energy"]
    assert energy["status"] == "ok" and energy["detail"]["difference_frac"] < 0.05
    assert "torch" in energy["value"] or "--no-load" in energy["value"]  # says why it was idle
    caps = _rows(doc, "caps")
    assert [k for k in caps] == ["minimum 200 W", "middle 450 W", "default 700 W", "restore"]
    assert caps["minimum 200 W"]["detail"]["enforced_w"] == {"0": 200.0, "1": 200.0}
    assert caps["minimum 200 W"]["detail"]["median_power_w"] == [200.0, 200.0]
    assert all(r["status"] == "ok" for r in caps.values())
    assert node.limits() == [700.0, 700.0] and node.journal_files() == []
    assert _rows(doc, "sampler")["cost"]["detail"]["cpu_share_of_core"] is not None
    if importlib.util.find_spec("sglang") is None:
        serve = _rows(doc, "workloads")["llama3-8b-inference (sglang)"]
        assert serve["status"] == "skipped" and "sglang is not installed" in serve["value"]
    assert "STATUS" in done.stdout and f"JSON: {out}" in done.stdout


def test_a_frozen_counter_and_an_unenforced_cap_fail_with_exit_status_1(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia", energy_frozen=True, enforced_limit_w=500.0))
    out = tmp_path / "selftest.json"
    done = node.launch("selftest", "--no-load", "--load-s", "3", "--only", "power,caps", "--site", str(_site(tmp_path, node)),
                       "-o", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    energy = _rows(doc, "power")["GPU 0 energy"]
    assert energy["status"] == "FAIL" and "stood still" in energy["value"]
    caps = _rows(doc, "caps")
    assert caps["minimum 200 W"]["status"] == "ok"
    assert caps["default 700 W"]["status"] == "FAIL" and "enforces 500 W" in caps["default 700 W"]["value"]
    assert caps["restore"]["status"] == "ok"
    assert node.limits() == [700.0] and node.journal_files() == []


def test_caps_not_permitted_are_skipped_with_the_reason(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia"))
    out = tmp_path / "selftest.json"
    done = node.launch("selftest", *FAST, "--power-method", "none", "--workloads", "none", "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    caps = _rows(doc, "caps")["caps"]
    assert caps["status"] == "skipped" and "never sets caps" in caps["value"]
    assert node.devices()[0]["set_log"] == []


def test_without_gpus_it_says_what_it_skipped(cpu_node, tmp_path):
    out = tmp_path / "selftest.json"
    done = cpu_node.launch("selftest", *FAST, "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    library = _rows(doc, "library")["GPU library"]
    assert library["status"] == "skipped" and "nvidia" in library["value"] and "amd" in library["value"]
    assert {r["check"] for r in doc["checks"]} == {"library", "gpus", "power", "meter", "caps", "sampler", "workloads"}
    assert doc["summary"]["FAIL"] == 0
    workloads = _rows(doc, "workloads")
    assert workloads["resnet50 (pytorch)"]["value"] == "no GPU: the short runs are on a GPU"
    assert "CPU power (RAPL)" in _rows(doc, "power")


@pytest.mark.parametrize("args, fragments", [
    (["--only", "bogus"], ["unknown check 'bogus'", "library, gpus"]),
    (["--only", "caps", "--power-method", "none"], ["--only caps", "never sets caps"]),
])
def test_bad_input_is_one_line_and_changes_nothing(tmp_path, args, fragments):
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia"))
    out = tmp_path / "selftest.json"
    done = node.launch("selftest", *FAST, *args, "-o", str(out))
    one_line_error(done, *fragments)
    assert not out.exists() and node.devices()[0]["set_log"] == [] and node.limits() == [700.0]


def test_refused_while_a_power_journal_exists(tmp_path):
    node = FakeNode(tmp_path, fgs.make_devices(1, "nvidia"))
    node.update(0, current_limit_w=300.0)  # left by a killed run, whose journal says 700 W
    node.state_dir.mkdir(parents=True, exist_ok=True)
    journal = node.state_dir / "journal.json"
    journal.write_text(json.dumps({"pid": 999999999, "gpus": [{"index": 0, "limit_w": 700.0}]}))
    out = tmp_path / "selftest.json"
    done = node.launch("selftest", *FAST, "--journal", str(journal), "-o", str(out))
    one_line_error(done, "power journal", "power restore")
    assert journal.exists() and not out.exists() and node.limits() == [300.0]
