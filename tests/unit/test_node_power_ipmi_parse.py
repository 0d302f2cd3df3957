"""The BMC source without a BMC: FreeIPMI's output formats (recorded from
freeipmi ipmi-dcmi/ipmi-dcmi.c `_output_power_statistics`, and from
ipmi-sensors against ipmi_sim), and the credentials file's faults."""
import pytest

from hpcai.measure.node_power import NodePowerSampler, SourceError
from hpcai.measure.ipmi import IpmiDcmiSource, parse_dcmi, parse_sensor

DCMI = """Current Power                        : 248 Watts
Minimum Power over sampling duration : 2 watts
Maximum Power over sampling duration : 292 watts
Average Power over sampling duration : 182 watts
Time Stamp                           : 11/23/2026 - 13:01:02
Statistics reporting time period     : 1000 milliseconds
Power Measurement                    : Active
"""


def test_dcmi_current_power():
    assert parse_dcmi(DCMI) == 248.0
    with pytest.raises(SourceError, match="not active"):
        parse_dcmi(DCMI.replace(": Active", ": Not Available"))


def test_sensor_row_by_name():
    out = "1,Node Power,Other Units Based Sensor,700.00,W,'OK'\n2,CPU Temp,Temperature,41.00,C,'OK'\n"
    assert parse_sensor(out, "Node Power") == 700.0
    with pytest.raises(SourceError, match="not W"):
        parse_sensor(out, "CPU Temp")
    with pytest.raises(SourceError, match="no sensor named 'PSU'"):
        parse_sensor(out, "PSU")
    with pytest.raises(SourceError, match=r"no reading \(N/A\)"):
        parse_sensor("1,Node Power,Other Units Based Sensor,N/A,W,N/A\n", "Node Power")


def test_unreadable_or_incomplete_credentials_file_is_a_reason_without_secrets(tmp_path):
    missing = tmp_path / "absent.conf"
    with pytest.raises(SourceError, match=f"credentials file {missing} cannot be read"):
        IpmiDcmiSource({"host": "127.0.0.1", "credentials_file": str(missing)}, 1e4)
    with pytest.raises(SourceError, match="cannot be read"):  # a folder: unreadable as a file
        IpmiDcmiSource({"host": "127.0.0.1", "credentials_file": str(tmp_path)}, 1e4)
    half = tmp_path / "half.conf"
    half.write_text("password Very-Secret-1\n")
    with pytest.raises(SourceError) as err:
        IpmiDcmiSource({"host": "127.0.0.1", "credentials_file": str(half)}, 1e4)
    assert "no username line" in str(err.value) and "Very-Secret-1" not in str(err.value)
    node = NodePowerSampler({"sources": ["ipmi"], "ipmi": {"host": "h", "credentials_file": str(half)}})
    assert node.runs == [] and node.summary(None)["reasons"] == [
        f"ipmi: credentials file {half} has no username line "
        "(a FreeIPMI config file: `username NAME`, `password SECRET`)"]
