"""The node's BMC through Redfish, with DMTF's Redfish library (`redfish` on
PyPI, python-redfish-library): the chassis' EnvironmentMetrics (PowerWatts,
EnergykWh: the PowerSubsystem era), else the older Power resource
(PowerControl[0].PowerConsumedWatts).

Credentials: the same file format as the IPMI source (`username NAME`,
`password SECRET` lines), read here and handed to the library in memory;
never on a command line, in a result, a log or an error. HTTP basic
authentication: no session is left open on the BMC.
"""
from __future__ import annotations

import time

from hpcai.measure.credentials import read_credentials
from hpcai.measure.source import Channel, PowerSource, Sample, SourceError
from hpcai.install import install_hint


class RedfishSource(PowerSource):
    kind = "redfish"

    def __init__(self, section: dict, max_power_w: float):
        self.max_power_w = max_power_w
        self.url = section.get("url", "")
        self.chassis = section.get("chassis", "")
        self.timeout_s = float(section.get("timeout_s", 3.0))
        self.channels = [Channel("node", "node")]
        self.resource = None  # the document read each time, found on the first read
        if not self.url:
            raise SourceError("node_power.redfish.url is not set")
        self.cred = section.get("credentials_file", "")
        self._user, self._password = read_credentials(self.cred)
        try:
            import redfish
        except ImportError:
            raise SourceError(f"the redfish library is missing: {install_hint('node')}") from None
        self._redfish = redfish
        self._client = None

    @property
    def api(self) -> str:
        which = "EnvironmentMetrics" if (self.resource or "").endswith("EnvironmentMetrics") \
            else "Power"
        return f"Redfish {which} (DMTF redfish library)"

    def _scrub(self, text: str) -> str:
        for secret in (self._user, self._password):
            if secret:
                text = text.replace(secret, "***")
        return text

    def _get(self, path: str) -> dict:
        try:
            resp = self._client.get(path, timeout=self.timeout_s, max_retry=1)
        except Exception as exc:  # the library raises its own and requests' errors
            raise SourceError(f"no answer from the Redfish service "
                              f"({type(exc).__name__}: {self._scrub(str(exc))[:120]})") from None
        if resp.status == 401:
            raise SourceError(f"the Redfish service refused the credentials in {self.cred}")
        if resp.status != 200:
            raise SourceError(f"Redfish GET {path} answered HTTP {resp.status}")
        return resp.dict

    def _connect(self) -> None:
        try:
            client = self._redfish.redfish_client(base_url=self.url, username=self._user,
                                                  password=self._password, timeout=self.timeout_s,
                                                  max_retry=1)
            client.login(auth="basic")
        except self._redfish.rest.v1.InvalidCredentialsError:
            raise SourceError(f"the Redfish service refused the credentials in {self.cred}") from None
        except Exception as exc:
            raise SourceError(f"no answer from the Redfish service "
                              f"({type(exc).__name__}: {self._scrub(str(exc))[:120]})") from None
        self._client = client
        chassis = self.chassis
        if not chassis:
            members = self._get("/redfish/v1/Chassis").get("Members") or []
            if not members:
                raise SourceError("the Redfish service lists no chassis")
            chassis = members[0]["@odata.id"]
        doc = self._get(chassis)
        link = (doc.get("EnvironmentMetrics") or doc.get("Power") or {}).get("@odata.id")
        if not link:
            raise SourceError(f"chassis {chassis} has neither EnvironmentMetrics nor Power")
        self.resource = link

    def read(self) -> Sample:
        if self._client is None:
            self._connect()
        t = time.monotonic()
        doc = self._get(self.resource)
        if "PowerControl" in doc:
            controls = doc.get("PowerControl") or [{}]
            watts = controls[0].get("PowerConsumedWatts")
        else:
            watts = (doc.get("PowerWatts") or {}).get("Reading")
        if watts is None:
            raise SourceError(f"{self.resource} has no power reading")
        # EnergykWh counts in kWh, too coarse for a benchmark window: power is integrated.
        return Sample(t, {"node": float(watts)}, {"node": None})

    def close(self) -> None:
        self._client = None
