"""GPU serial numbers, read where the library gives them (issue 27): NVML's
nvmlDeviceGetSerial and amdsmi's asic_serial, against the FAKE pynvml and amdsmi
(tests/fakes), and carried into the result, the fleet analysis and a bundle's
statement. A part that cannot say (NVML NotSupported on GeForce) records null."""
from __future__ import annotations

import json
import random

import pytest
from jsonschema import Draft202012Validator

from conftest import ROOT
from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)
from fleet_campaigns import normal_gpu, write_campaign
from hpcai.gpu.amd import AmdLibrary
from hpcai.gpu.nvidia import NvidiaLibrary
from hpcai.launcher.bundles.statement import run_predicate
from hpcai.launcher.fleet.analysis import analyse
from hpcai.launcher.fleet.records import load
from hpcai.launcher.fleet.report import markdown

CAPS = (300.0, 700.0)


@pytest.fixture
def node(tmp_path, monkeypatch):
    def make(devices):
        path = tmp_path / "gpus.json"
        fgs.install(monkeypatch, path, devices)
        return path

    return make


def test_nvidia_serial_is_the_boards_and_null_where_nvml_does_not_support_it(node):
    devices = fgs.make_devices(2, "nvidia")
    devices[0]["serial"] = "1654923001234"
    devices[1]["not_supported"] = ["serial"]  # a GeForce part: NotSupported
    node(devices)
    with NvidiaLibrary() as lib:
        first, second = (d.info() for d in lib.devices())
        failures = lib.devices()[1].failures
    assert first.serial == "1654923001234"
    assert second.serial is None
    assert second.uuid == devices[1]["uuid"]  # the rest of the identity still read
    assert "nvmlDeviceGetSerial" not in failures  # NotSupported is no failure


def test_an_nvml_error_other_than_not_supported_leaves_the_serial_null_not_the_info(node):
    devices = fgs.make_devices(1, "nvidia")
    devices[0]["errors"] = {"serial": 999}  # NVML_ERROR_UNKNOWN
    node(devices)
    with NvidiaLibrary() as lib:
        dev = lib.devices()[0]
        info = dev.info()
    assert info.serial is None and info.name == "NVIDIA H100 80GB HBM3"
    assert "nvmlDeviceGetSerial" in dev.failures


def test_amd_serial_is_the_asic_serial_and_null_when_amdsmi_reports_na(node):
    devices = fgs.make_devices(2, "amd")
    devices[0]["serial"] = "0x5D1C3A2B00000000"
    devices[1]["not_supported"] = ["serial"]  # asic_serial comes back "N/A"
    node(devices)
    with AmdLibrary() as lib:
        first, second = (d.info() for d in lib.devices())
    assert first.serial == "0x5D1C3A2B00000000"
    assert second.serial is None


def test_the_default_fake_gpus_of_one_node_have_distinct_serials():
    for vendor in ("nvidia", "amd"):
        serials = [d["serial"] for d in fgs.make_devices(4, vendor)]
        assert len(set(serials)) == 4, serials


def test_the_result_schema_accepts_a_serial_and_a_null_one():
    schema = json.loads((ROOT / "hpcai" / "schema" / "result-v1.schema.json").read_text())
    gpu = schema["$defs"]["gpu"]
    validator = Draft202012Validator({**gpu, "$defs": schema["$defs"]})
    base = {"index": 0, "vendor": "nvidia", "name": "H100", "uuid": "GPU-1",
            "memory_total_bytes": 1, "used": True, "samples": 1, "power_w": None,
            "energy_j": {"counter": None, "integrated": None, "used": None}}
    assert gpu["properties"]["serial"]["type"] == ["string", "null"]
    for serial in ("1654923001234", None):
        errors = [e.message for e in validator.iter_errors({**base, "serial": serial})]
        assert not any("serial" in m for m in errors), errors
    assert any("serial" in e.message or "42" in e.message
               for e in validator.iter_errors({**base, "serial": 42}))


def test_the_fleet_analysis_and_its_outlier_table_show_each_gpus_serial(tmp_path):
    rng = random.Random(3)
    gpus = [normal_gpu("n01", 1, i, CAPS, rng) for i in range(6)]
    gpus[2] = normal_gpu("n01", 1, 2, CAPS, rng, {300.0: {"power": 650.0, "enforced": False}})
    for i, g in enumerate(gpus):
        g["serial"] = f"16549230012{i:02d}"
    # A unit written before serials were read: its results' GPU record names it.
    gpus[4]["serial"] = None
    for doc in gpus[4]["results"]:
        doc["gpus"][0]["serial"] = "1654923001204"
    _, records = load([str(write_campaign(tmp_path / "c", gpus))])
    doc = analyse(records, list(CAPS))
    serials = {g["index"]: g["serial"] for g in doc["gpus"]}
    assert serials == {i: f"16549230012{i:02d}" for i in range(6)}
    text = markdown(doc, [])
    assert "| n01 | 2 | " in text and "| 1654923001202 | fail |" in text


def test_a_bundle_statement_names_the_serial_the_result_recorded():
    doc = {"gpus": [{"index": 0, "name": "H100", "uuid": "GPU-a", "serial": "1654923001234",
                     "used": True},
                    {"index": 1, "name": "RTX 4090", "uuid": "GPU-b", "serial": None,
                     "used": True}],
           "software": {"gpu_library": {"driver": "550.54.15"}}}
    predicate = run_predicate("run", doc, {"verdict": "pass", "failed": []})
    assert [g["serial"] for g in predicate["gpus"]] == ["1654923001234", None]


def test_a_fleet_unit_records_the_serial_and_a_resumed_one_gains_it(tmp_path):
    from hpcai.gpu.base import GpuInfo
    from hpcai.launcher.fleet.campaign import Campaign
    from hpcai.launcher.fleet.run import _unit

    campaign = Campaign(tmp_path / "c", {"workload": "resnet50", "caps_w": [300.0]})
    info = GpuInfo(index=0, vendor="nvidia", name="H100", uuid="GPU-a", memory_total_bytes=1,
                   serial="1654923001234")
    assert _unit(campaign, "n01", info).doc["serial"] == "1654923001234"
    # A unit written before serials were read (serial null) gains it on resume, state kept.
    path = campaign.unit_dir("n01", 0) / "unit.json"
    old = {**json.loads(path.read_text()), "serial": None, "state": "interrupted"}
    path.write_text(json.dumps(old))
    unit = _unit(campaign, "n01", info)
    saved = json.loads(path.read_text())
    assert unit.doc["serial"] == saved["serial"] == "1654923001234"
    assert saved["state"] == "interrupted"
    # A GPU without one (GeForce) leaves null.
    other = GpuInfo(index=1, vendor="nvidia", name="RTX 4090", uuid="GPU-b", memory_total_bytes=1)
    assert _unit(campaign, "n01", other).doc["serial"] is None
