"""The self-test's energy check says whether it ran under load, read while the
load ran: on the first H100 it ran at 700 W and still said "idle (None)".
FAKE NVML (tests/fakes); the load child is a stand-in that needs no torch."""
from __future__ import annotations

import json

from hpcai.launcher.selftest import load as load_mod
from hpcai.launcher.selftest import run_selftest

from fakes import fake_gpu_state as fgs  # noqa: E402 (tests/ is on sys.path via conftest)

# What the real child prints once its matrices are on the GPU, then it keeps busy.
STAND_IN_LOAD = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def _energy_row(tmp_path, monkeypatch, child: str) -> dict:
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(1, "nvidia"))
    monkeypatch.setattr(load_mod, "_CHILD", child)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "selftest.json"
    run_selftest(only=["power"], load=True, load_s=0.5, output=str(out),
                 journal=str(tmp_path / "journal.json"))
    rows = json.loads(out.read_text())["checks"]
    return next(r for r in rows if r["check"] == "power" and r["item"] == "GPU 0 energy")


def test_an_energy_check_under_load_says_so(tmp_path, monkeypatch):
    row = _energy_row(tmp_path, monkeypatch, STAND_IN_LOAD)
    assert row["value"].endswith("under load") and row["detail"]["loaded"] is True


def test_an_energy_check_without_its_load_says_why(tmp_path, monkeypatch):
    row = _energy_row(tmp_path, monkeypatch, "print('torch sees no GPU', flush=True)\n")
    assert row["value"].endswith("idle (torch sees no GPU)") and row["detail"]["loaded"] is False
