"""The BMC source against a real BMC simulator: OpenIPMI's ipmi_sim (Debian's
openipmi), read over its LAN interface on 127.0.0.1 with FreeIPMI (Debian's
freeipmi-tools). The test gives the simulated BMC a power sensor in watts and
changes its value.

ipmi_sim implements no DCMI commands: `ipmi-dcmi --get-system-power-statistics`
gets "ipmi_cmd_dcmi_get_power_reading: command invalid or unsupported" from it.
So the DCMI path is tested here only for that answer (and its parser on
FreeIPMI's output format in tests/unit/test_node_power_ipmi_parse.py); the
reading itself comes from the SDR sensor the source falls back to.
"""
import os
import shutil
import socket
import subprocess
import time

import pytest
from processes import kill_marked, new_mark, popen_options

from hpcai.measure import node_power as NP
from hpcai.measure.ipmi import IpmiDcmiSource

SECRET = "s3cret-Pw-77"
# A Full Sensor Record (IPMI 2.0 table 43-1): sensor 1 on MC 0x20, type 0x0b
# (other units-based), threshold, unit 6 = Watts, M = 10 (a raw 50 reads 500 W),
# ID "Node Power".
SDR = ("0x00 0x00 0x51 0x01 0x35 0x20 0x00 0x01 0x07 0x01 0x67 0x68 0x0b 0x01 "
       "0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x06 0x00 0x00 0x0a 0x00 0x00 0x00 0x00 "
       "0x00 0x00 0x00 0x00 0x00 0xff 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00 "
       "0x00 0x00 0x00 0xca " + " ".join(hex(b) for b in b"Node Power"))


class Bmc:
    def __init__(self, folder, port):
        self.folder, self.port = folder, port
        self.value_file = folder / "power-raw"

    def set_watts(self, watts: int) -> None:
        self.value_file.write_text(f"{watts // 10}\n")  # M = 10 in the SDR

    def section(self, **extra) -> dict:
        cred = self.folder / "bmc.conf"
        return {"host": "127.0.0.1", "port": self.port, "credentials_file": str(cred),
                "driver_type": "LAN", "timeout_s": 1.0, **extra}


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ipmi_bmc(tmp_path):
    for tool in ("ipmi_sim", "ipmi-sensors", "ipmi-dcmi"):
        assert shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}"), \
            f"{tool} is missing: run `make setup-system` (openipmi, freeipmi-tools)"
    port = _free_udp_port()
    bmc = Bmc(tmp_path, port)
    bmc.set_watts(500)
    (tmp_path / "state").mkdir()
    (tmp_path / "lan.conf").write_text(f"""name "hpcai-test"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
user 2 true "hpcai" "{SECRET}" admin 10 none md2 md5 straight
""")
    (tmp_path / "cmds.emu").write_text(f"""mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sensor_add 0x20 0 1 0x0b 0x01 poll 100 file "{bmc.value_file}"
main_sdr_add 0x20 {SDR}
sensor_set_event_support 0x20 0 1 enable scanning per-state 000000000000000 000000000000000 000000000000000 000000000000000
mc_enable 0x20
""")
    cred = tmp_path / "bmc.conf"
    cred.write_text(f"username hpcai\npassword {SECRET}\n")
    cred.chmod(0o600)
    mark = new_mark()
    sim = subprocess.Popen(["timeout", "120", "ipmi_sim", "-n", "-c", str(tmp_path / "lan.conf"),
                            "-f", str(tmp_path / "cmds.emu"), "-s", str(tmp_path / "state")],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, **popen_options(os.environ, mark))
    try:
        source = IpmiDcmiSource(bmc.section(sensor="Node Power"), 1e4)
        deadline = time.monotonic() + 10
        while True:  # ready when it answers
            try:
                source.read()
                break
            except NP.SourceError:
                assert sim.poll() is None, "ipmi_sim exited"
                assert time.monotonic() < deadline, "ipmi_sim did not answer within 10 s"
                time.sleep(0.2)
        source.close()
        yield bmc
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=5)
        finally:
            kill_marked(mark)


def test_bmc_power_read_over_lan_and_changed_by_the_test(ipmi_bmc):
    source = IpmiDcmiSource(ipmi_bmc.section(sensor="Node Power"), 1e4)
    try:
        assert source.read().power_w == {"node": 500.0}
        assert source.mode == "sensor"  # ipmi_sim has no DCMI: fell back to the SDR sensor
        assert "ipmi-sensors" in source.api
        ipmi_bmc.set_watts(730)
        time.sleep(0.3)  # the simulator polls its file every 100 ms
        assert source.read().power_w == {"node": 730.0}
    finally:
        source.close()


def test_no_dcmi_and_no_sensor_is_a_precise_reason(ipmi_bmc):
    run = NP.SourceRun(IpmiDcmiSource(ipmi_bmc.section(), 1e4), interval_s=1.0)
    run.tick()
    assert list(run.faults) == ["the BMC has no DCMI power reading (ipmi-dcmi: command invalid "
                                "or unsupported); name an SDR power sensor in node_power.ipmi.sensor"]


def test_wrong_password_is_a_reason_without_the_secret(ipmi_bmc, tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("username hpcai\npassword not-the-Pw-42\n")
    run = NP.SourceRun(IpmiDcmiSource({**ipmi_bmc.section(sensor="Node Power"),
                                       "credentials_file": str(bad)}, 1e4), interval_s=1.0)
    run.tick()
    (reason,) = run.faults
    assert "refused the credentials" in reason and str(bad) in reason
    assert "not-the-Pw-42" not in reason and SECRET not in reason


def test_sampler_reads_the_bmc_at_its_own_rate_and_integrates(ipmi_bmc):
    node = NP.NodePowerSampler({"sources": ["ipmi"], "ipmi": ipmi_bmc.section(sensor="Node Power",
                                                                               interval_s=0.2)})
    run = node.runs[0]
    assert run.interval_s == 1.0  # a BMC is never polled faster than once a second
    node.start()
    t0 = node.wall(time.monotonic())
    time.sleep(2.2)
    t1 = node.wall(time.monotonic())
    node.stop()
    summary = node.summary((t0, t1))
    (entry,) = summary["sources"]
    assert entry["scope"] == "node" and entry["samples"] >= 2
    assert 0.8 <= entry["achieved_interval_s"] <= 1.5
    assert entry["energy_basis"] == "integrated power"
    assert entry["mean_power_w"] == pytest.approx(500.0)
    assert summary["reasons"] == []
