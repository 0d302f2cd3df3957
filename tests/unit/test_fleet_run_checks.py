"""`fleet run --local` refuses bad input before anything is written or capped
(GPUs from the FAKE pynvml, tests/fakes, installed in-process)."""
import pytest

from fakes import fake_gpu_state as fgs
from hpcai.errors import CapOutOfRangeError, DeviceError
from hpcai.launcher.fleet.campaign import node_name
from hpcai.launcher.fleet.run import FleetRequest, gpu_env, run_local


def test_a_cap_outside_a_gpus_range_is_refused_before_the_campaign_exists(tmp_path, monkeypatch):
    devices = fgs.make_devices(3, "nvidia")
    devices[2]["min_limit_w"] = 250.0  # one GPU of the node accepts less
    fgs.install(monkeypatch, tmp_path / "gpus.json", devices)
    req = FleetRequest(workload="resnet50", caps=[220.0, 700.0], output=str(tmp_path / "c"))
    with pytest.raises(CapOutOfRangeError, match="outside GPU 2's range 250-700 W"):
        run_local(req)
    assert not (tmp_path / "c").exists()
    assert all(d["set_log"] == [] for d in fgs.read_state(tmp_path / "gpus.json")["devices"])


def test_a_node_without_gpus_is_one_error(tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", [])
    req = FleetRequest(workload="resnet50", caps=[300.0], output=str(tmp_path / "c"))
    with pytest.raises(DeviceError, match="no GPU visible on this node"):
        run_local(req)
    assert not (tmp_path / "c").exists()


def test_each_gpus_run_sees_that_gpu_alone_by_uuid(monkeypatch):
    from hpcai.gpu.base import GpuInfo

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    info = GpuInfo(index=2, vendor="nvidia", name="H100", uuid="GPU-abc", memory_total_bytes=1)
    assert gpu_env(info, "GPU-abc")["CUDA_VISIBLE_DEVICES"] == "GPU-abc"
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    amd = GpuInfo(index=1, vendor="amd", name="MI300X", uuid="x", memory_total_bytes=1,
                  visible_id="GPU-0123456789abcdef")
    env = gpu_env(amd, "GPU-0123456789abcdef")
    assert env["ROCR_VISIBLE_DEVICES"] == "GPU-0123456789abcdef"
    assert "HIP_VISIBLE_DEVICES" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_the_node_name_is_slurms_inside_a_job(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu017")
    assert node_name() == "gpu017"
    with pytest.raises(Exception, match="cannot name a folder"):
        node_name("../etc")
