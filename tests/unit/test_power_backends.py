"""Power backends (launcher/power/backends.py) over the fake vendor libraries."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from hpcai.errors import ConfigError, DeviceError, PowerError, UsageError
from hpcai.launcher.power import backends
from hpcai.launcher.power.backends import CommandBackend, NoneBackend, make_backend

FAKES = Path(__file__).resolve().parents[1] / "fakes"
from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)

PY = shlex.quote(sys.executable)
# A stand-in for `sudo -n nvidia-smi -i {index} -pl {watts}`: changes the fake node.
SET_HELPER = (
    f"{PY} -c 'import sys; sys.path.insert(0, sys.argv[1]); import fake_gpu_state as f; "
    "f.update_device(sys.argv[2], int(sys.argv[3]), current_limit_w=float(sys.argv[4]))' "
    f"{shlex.quote(str(FAKES))} {{state}} {{index}} {{watts}}"
)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(devices):
        path = tmp_path / "gpus.json"
        fgs.install(monkeypatch, path, devices)
        return path

    return make


@pytest.mark.parametrize("vendor, expected", [("nvidia", "nvml"), ("amd", "amdsmi")])
def test_auto_picks_the_vendor_method(node, vendor, expected):
    node(fgs.make_devices(2, vendor))
    with make_backend("auto") as backend:
        assert backend.name == expected
        assert [g.index for g in backend.gpus()] == [0, 1]
        assert {g.vendor for g in backend.gpus()} == {vendor}


def test_auto_without_gpus_is_none(tmp_path, monkeypatch):
    for name in ("pynvml", "amdsmi"):
        monkeypatch.setitem(sys.modules, name, fgs.load_fake_module(name))
    monkeypatch.setenv(fgs.ENV, str(tmp_path / "absent.json"))
    with make_backend("auto") as backend:
        assert backend.name == "none" and backend.gpus() == []
        assert backend.can_set()[0] is False


@pytest.mark.parametrize("vendor, method", [("nvidia", "nvml"), ("amd", "amdsmi")])
def test_library_backend_reads_and_sets(node, vendor, method):
    path = node(fgs.make_devices(2, vendor))
    with make_backend(method, vendor) as backend:
        backend.set_limit_w(1, 350)
        assert backend.limits(1).current_w == pytest.approx(350.0)
        assert backend.limits(0).current_w > 600
    assert fgs.read_state(path)["devices"][1]["current_limit_w"] == pytest.approx(350.0)


def test_unknown_index_is_a_usage_error(node):
    node(fgs.make_devices(2, "nvidia"))
    with make_backend("nvml") as backend, pytest.raises(UsageError) as info:
        backend.limits(5)
    assert "0, 1" in info.value.hint


@pytest.mark.parametrize("euid, expected", [(0, True), (1000, False)])
def test_nvml_can_set_depends_on_root(node, monkeypatch, euid, expected):
    node(fgs.make_devices(1, "nvidia"))
    monkeypatch.setattr(backends.os, "geteuid", lambda: euid)
    with make_backend("nvml") as backend:
        ok, why = backend.can_set()
    assert ok is expected
    assert "root" in why


def test_command_backend_sets_through_the_template_and_reads_back(node):
    path = node(fgs.make_devices(2, "nvidia"))
    template = SET_HELPER.replace("{state}", shlex.quote(str(path)))
    with make_backend("command", "nvidia", template) as backend:
        assert backend.name == "command"
        assert backend.can_set() == (True, f"site command configured: {template}")
        backend.set_limit_w(1, 299.6)  # {watts} is an integer
        assert backend.limits(1).current_w == 300.0
    assert fgs.read_state(path)["devices"][0]["current_limit_w"] == 700.0


def test_command_fields_are_filled_per_argument(node, tmp_path):
    node(fgs.make_devices(1, "nvidia", node="0badcafe"))
    template = "helper --gpu={index} {watts} {milliwatts} {microwatts} {uuid}"
    with make_backend("command", None, template) as backend:
        argv = backend.argv(0, 250.25)
    assert argv == ["helper", "--gpu=0", "250", "250250", "250250000", "GPU-0badcafe-0000-4000-8000-000000000000"]


def test_command_failure_names_command_and_last_stderr_line(node):
    node(fgs.make_devices(1, "nvidia"))
    template = f"{PY} -c 'import sys; sys.stderr.write(\"first\\nsudo: a password is required\\n\"); sys.exit(3)' {{index}}"
    with make_backend("command", "nvidia", template) as backend, pytest.raises(PowerError) as info:
        backend.set_limit_w(0, 300)
    message = info.value.message
    assert "exit code 3" in message and sys.executable in message
    assert message.endswith(": sudo: a password is required")  # the last line, not "first"


def test_command_not_found(node):
    node(fgs.make_devices(1, "nvidia"))
    with make_backend("command", "nvidia", "/nonexistent/hpcai-set-cap {index} {watts}") as backend:
        with pytest.raises(PowerError, match="not found"):
            backend.set_limit_w(0, 300)


def test_command_timeout(node, monkeypatch):
    node(fgs.make_devices(1, "nvidia"))
    monkeypatch.setattr(backends, "COMMAND_TIMEOUT_S", 0.5)
    with make_backend("command", "nvidia", f"{PY} -c 'import time; time.sleep(10)' {{watts}}") as backend:
        with pytest.raises(PowerError, match="timed out"):
            backend.set_limit_w(0, 300)


@pytest.mark.parametrize("template", ["set-cap {index} {power}", "set-cap 'unclosed {watts}", "   "])
def test_bad_command_template_is_a_config_error_before_touching_gpus(template, monkeypatch):
    monkeypatch.setattr(backends, "open_library", lambda *a: pytest.fail("opened a library"))
    with pytest.raises(ConfigError):
        make_backend("command", "nvidia", template)


def test_command_without_template_is_a_config_error():
    with pytest.raises(ConfigError):
        make_backend("command", "nvidia", None)


def test_command_without_gpus_is_a_device_error(tmp_path, monkeypatch):
    for name in ("pynvml", "amdsmi"):
        monkeypatch.setitem(sys.modules, name, fgs.load_fake_module(name))
    monkeypatch.setenv(fgs.ENV, str(tmp_path / "absent.json"))
    with pytest.raises(DeviceError, match="neither sees a GPU"):
        make_backend("command", None, "set-cap {index} {watts}")


def test_none_backend_reports_gpus_but_refuses_to_set(node):
    path = node(fgs.make_devices(2, "nvidia"))
    with make_backend("none") as backend:
        assert isinstance(backend, NoneBackend)
        assert len(backend.gpus()) == 2
        assert backend.limits(0).current_w == 700.0
        with pytest.raises(PowerError) as info:
            backend.set_limit_w(0, 300)
        assert backend.can_set()[0] is False
    assert "cannot set caps" in info.value.message
    assert "nvml|amdsmi|command" in info.value.hint
    assert fgs.read_state(path)["devices"][0]["set_log"] == []


def test_unknown_method_and_vendor_mismatch_are_usage_errors():
    with pytest.raises(UsageError):
        make_backend("ipmi")
    with pytest.raises(UsageError):
        make_backend("nvml", "amd")
    with pytest.raises(UsageError):
        make_backend("amdsmi", "nvidia")


def test_command_backend_is_a_library_backend(node):
    node(fgs.make_devices(1, "amd"))
    with make_backend("command", "amd", "amd-smi set -g {index} -o {watts}") as backend:
        assert isinstance(backend, CommandBackend)
        assert backend.gpus()[0].vendor == "amd"
        assert backend.argv(0, 400) == ["amd-smi", "set", "-g", "0", "-o", "400"]
