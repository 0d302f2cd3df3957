"""The node's BMC over IPMI LAN, read with FreeIPMI (Debian's freeipmi-tools).

Why FreeIPMI rather than ipmitool: its --config-file carries the username
*and* the password (freeipmi.conf(5): "used to hide usernames, passwords,
and other sensitive information from the ps(1) command"), so nothing secret
is on a command line; ipmitool takes the password from a file (-f) but the
username only on the command line (-U). FreeIPMI also accepts host:port.

What is read: the DCMI power reading (`ipmi-dcmi --get-system-power-statistics`,
"Current Power"), else, where the BMC has no DCMI (OpenIPMI's ipmi_sim answers
"command invalid or unsupported"), a named SDR power sensor in watts
(`ipmi-sensors`), which many BMCs expose as "Total Power" or similar.

The site's credentials_file is a FreeIPMI configuration file with `username`
and `password` lines. Its contents never reach a result, a log or an error.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from hpcai.measure.credentials import read_credentials
from hpcai.measure.source import Channel, PowerSource, Sample, SourceError

DCMI_UNSUPPORTED = "command invalid or unsupported"


class IpmiDcmiSource(PowerSource):
    kind = "ipmi"

    def __init__(self, section: dict, max_power_w: float):
        self.max_power_w = max_power_w
        self.host = section.get("host", "")
        self.port = int(section.get("port", 623))
        self.sensor = section.get("sensor", "")
        self.timeout_s = float(section.get("timeout_s", 3.0))
        self.driver = section.get("driver_type", "LAN_2_0")
        self.channels = [Channel("node", "node")]
        self.mode = "dcmi"
        if not self.host:
            raise SourceError("node_power.ipmi.host is not set")
        self.cred = Path(section.get("credentials_file", ""))
        self._secrets = self._check_credentials()
        self.tools = {}
        for tool in ("ipmi-dcmi", "ipmi-sensors"):
            found = shutil.which(tool) or (f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None)
            if found is None:
                raise SourceError(f"{tool} is missing: install Debian's freeipmi-tools")
            self.tools[tool] = found
        self._cache = tempfile.mkdtemp(prefix="hpcai-sdr-")  # FreeIPMI wants a private folder

    def close(self) -> None:
        shutil.rmtree(self._cache, ignore_errors=True)

    @property
    def api(self) -> str:
        return ("IPMI DCMI Get Power Reading (FreeIPMI ipmi-dcmi)" if self.mode == "dcmi"
                else f"IPMI SDR sensor {self.sensor!r} (FreeIPMI ipmi-sensors)")

    def _check_credentials(self) -> list[str]:
        """The values, kept only to scrub them from any message; never shown."""
        return [v for v in read_credentials(self.cred) if v]

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _run(self, tool: str, extra: list[str]) -> str:
        args = [self.tools[tool], "--config-file", str(self.cred), "-h", f"{self.host}:{self.port}",
                "-D", self.driver, "--session-timeout", str(int(self.timeout_s * 1000)),
                "--retransmission-timeout", str(max(100, int(self.timeout_s * 250))), *extra]
        try:
            done = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=self.timeout_s + 2, env={**os.environ, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            raise SourceError(f"no answer from the BMC within {self.timeout_s + 2:g} s") from None
        if done.returncode != 0:
            message = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")
            message = self._scrub(message.splitlines()[-1])
            if "password" in message or "username" in message or "privilege" in message:
                raise SourceError(f"the BMC refused the credentials in {self.cred} ({message})")
            raise SourceError(f"BMC read failed ({message})")
        return done.stdout

    def read(self) -> Sample:
        t = time.monotonic()
        if self.mode == "dcmi":
            try:
                watts = self._dcmi()
            except SourceError as exc:
                if DCMI_UNSUPPORTED not in str(exc):
                    raise
                if not self.sensor:
                    raise SourceError("the BMC has no DCMI power reading (ipmi-dcmi: "
                                      f"{DCMI_UNSUPPORTED}); name an SDR power sensor in "
                                      "node_power.ipmi.sensor") from None
                self.mode = "sensor"
                watts = self._sensor()
        else:
            watts = self._sensor()
        return Sample(t, {"node": watts}, {"node": None})

    def _dcmi(self) -> float:
        out = self._run("ipmi-dcmi", ["--get-system-power-statistics"])
        return parse_dcmi(out)

    def _sensor(self) -> float:
        out = self._run("ipmi-sensors", ["--sdr-cache-directory", self._cache, "--quiet-cache",
                                         "--no-header-output", "--comma-separated-output"])
        return parse_sensor(out, self.sensor)


def parse_dcmi(text: str) -> float:
    """`ipmi-dcmi --get-system-power-statistics`: "Current Power : 248 Watts"."""
    active = True
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Power Measurement" and value.strip().lower() != "active":
            active = False
    if not active:
        raise SourceError("the BMC reports its DCMI power measurement as not active")
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Current Power":
            number, _, unit = value.strip().partition(" ")
            if unit.strip() != "Watts":
                raise SourceError(f"DCMI current power in {unit.strip()!r}, not Watts")
            return float(number)
    raise SourceError("ipmi-dcmi printed no Current Power line")


def parse_sensor(text: str, name: str) -> float:
    """`ipmi-sensors --comma-separated-output`: ID,Name,Type,Reading,Units,Event."""
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 5 and row[1] == name:
            if row[4] != "W":
                raise SourceError(f"sensor {name!r} reads in {row[4]!r}, not W")
            if row[3] == "N/A":
                raise SourceError(f"sensor {name!r} has no reading (N/A)")
            return float(row[3])
    raise SourceError(f"the BMC has no sensor named {name!r}")
