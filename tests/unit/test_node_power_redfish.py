"""The Redfish source with DMTF's real Redfish library (`redfish`) against a
STAND-IN Redfish service: a static tree of Redfish documents served on
127.0.0.1 (no real Redfish service can run here). The documents follow the
DMTF mockup public-rackmount1 (ServiceRoot, ChassisCollection, Chassis/1U,
Chassis/1U/Power with PowerControl "System Input Power", and
Chassis/1U/EnvironmentMetrics with PowerWatts/EnergykWh); the stand-in checks
HTTP basic credentials as a service does (401 otherwise)."""
import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hpcai.measure import node_power as NP
from hpcai.measure.redfish import RedfishSource

USER, SECRET = "root", "Rf-Secret-9"


def documents(env_metrics: bool) -> dict:
    chassis = {"@odata.id": "/redfish/v1/Chassis/1U", "@odata.type": "#Chassis.v1_25_0.Chassis",
               "Id": "1U", "Name": "Computer System Chassis", "ChassisType": "RackMount",
               "Power": {"@odata.id": "/redfish/v1/Chassis/1U/Power"}}
    if env_metrics:
        chassis["EnvironmentMetrics"] = {"@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics"}
    return {
        "/redfish/v1": {"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_16_0.ServiceRoot",
                        "Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.17.0",
                        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
                        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}},
        "/redfish/v1/SessionService/Sessions": {
            "@odata.id": "/redfish/v1/SessionService/Sessions",
            "@odata.type": "#SessionCollection.SessionCollection", "Name": "Session Collection",
            "Members@odata.count": 0, "Members": []},
        "/redfish/v1/Chassis": {"@odata.id": "/redfish/v1/Chassis",
                                "@odata.type": "#ChassisCollection.ChassisCollection",
                                "Name": "Chassis Collection", "Members@odata.count": 1,
                                "Members": [{"@odata.id": "/redfish/v1/Chassis/1U"}]},
        "/redfish/v1/Chassis/1U": chassis,
        "/redfish/v1/Chassis/1U/Power": {
            "@odata.id": "/redfish/v1/Chassis/1U/Power", "@odata.type": "#Power.v1_7_1.Power",
            "Id": "Power", "Name": "Power",
            "PowerControl": [{"@odata.id": "/redfish/v1/Chassis/1U/Power#/PowerControl/0",
                              "MemberId": "0", "Name": "System Input Power",
                              "PowerConsumedWatts": 344, "PowerCapacityWatts": 800,
                              "PowerMetrics": {"IntervalInMin": 30, "MinConsumedWatts": 271,
                                               "MaxConsumedWatts": 489,
                                               "AverageConsumedWatts": 319}}]},
        "/redfish/v1/Chassis/1U/EnvironmentMetrics": {
            "@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics",
            "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
            "Id": "EnvironmentMetrics", "Name": "Chassis Environment Metrics",
            "PowerWatts": {"DataSourceUri": "/redfish/v1/Chassis/1U/Sensors/PowerConsumption",
                           "Reading": 374},
            "EnergykWh": {"DataSourceUri": "/redfish/v1/Chassis/1U/Sensors/EnergyConsumption",
                          "Reading": 36166}},
    }


class StandIn:
    def __init__(self, env_metrics=True, delay_s=0.0):
        self.docs = documents(env_metrics)
        self.delay_s = delay_s
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if stand_in.delay_s:
                    time.sleep(stand_in.delay_s)
                good = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
                path = self.path.rstrip("/")
                if path != "/redfish/v1" and self.headers.get("Authorization") != good:
                    self.send_response(401)
                    self.end_headers()
                    return
                doc = stand_in.docs.get(path)
                body = json.dumps(doc).encode()
                self.send_response(200 if doc else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    made = []

    def make(**kw):
        made.append(StandIn(**kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


def cred(tmp_path, password=SECRET):
    path = tmp_path / "bmc.conf"
    path.write_text(f"username {USER}\npassword {password}\n")
    return str(path)


def test_environment_metrics_power_read_and_changed(service, tmp_path):
    svc = service()
    source = RedfishSource({"url": svc.url, "credentials_file": cred(tmp_path)}, 1e4)
    assert source.read().power_w == {"node": 374.0}
    assert source.api == "Redfish EnvironmentMetrics (DMTF redfish library)"
    svc.docs["/redfish/v1/Chassis/1U/EnvironmentMetrics"]["PowerWatts"]["Reading"] = 512
    assert source.read().power_w == {"node": 512.0}


def test_the_older_power_resource(service, tmp_path):
    svc = service(env_metrics=False)
    source = RedfishSource({"url": svc.url, "credentials_file": cred(tmp_path)}, 1e4)
    assert source.read().power_w == {"node": 344.0}
    assert source.api == "Redfish Power (DMTF redfish library)"


def test_wrong_password_is_a_reason_without_secrets(service, tmp_path):
    svc = service()
    run = NP.SourceRun(RedfishSource({"url": svc.url, "credentials_file": cred(tmp_path, "Nope-77")},
                                     1e4), interval_s=1.0)
    run.tick()
    (reason,) = run.faults
    assert "refused the credentials" in reason
    assert "Nope-77" not in reason and SECRET not in reason


def test_a_slow_service_is_a_reason(service, tmp_path):
    svc = service()
    source = RedfishSource({"url": svc.url, "credentials_file": cred(tmp_path), "timeout_s": 0.3}, 1e4)
    source.read()
    svc.delay_s = 1.0
    run = NP.SourceRun(source, interval_s=1.0)
    run.tick()
    assert any(r.startswith("no answer from the Redfish service") for r in run.faults)
