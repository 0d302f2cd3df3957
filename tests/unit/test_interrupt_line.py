"""The last line after an interrupt says "power limits restored" only where this
process set limits and put them back: not after an uncapped run, a report or
`info` (issue 31). GPUs: the fake pynvml (tests/fakes), at NVML's boundary."""
import pytest

from fakes import fake_gpu_state as fgs
from hpcai.errors import Interrupted
from hpcai.launcher.cli.guarded import run_guarded
from hpcai.launcher.power import restoring
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.session import CapSession


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(restoring, "_restored_any", False)


def interrupted_after(work):
    def run():
        work()
        raise KeyboardInterrupt
    return run


def test_no_limits_set_no_restore_claimed(fresh, capsys, tmp_path, monkeypatch):
    fgs.install(monkeypatch, tmp_path / "gpus.json", fgs.make_devices(2, "nvidia"))

    def uncapped():
        with make_backend("nvml") as backend, CapSession(backend, None, [0, 1], tmp_path / "journal.json"):
            pass

    with pytest.raises(SystemExit) as done:
        run_guarded(interrupted_after(uncapped))
    assert done.value.code == 130
    assert capsys.readouterr().err.strip() == "hpcai-launch: interrupted"


def test_limits_set_and_put_back_are_said_restored(fresh, capsys, tmp_path, monkeypatch):
    state = tmp_path / "gpus.json"
    fgs.install(monkeypatch, state, fgs.make_devices(2, "nvidia"))

    def capped():
        with make_backend("nvml") as backend, CapSession(backend, 300.0, [0, 1], tmp_path / "journal.json"):
            assert [d["current_limit_w"] for d in fgs.read_state(state)["devices"]] == [300.0, 300.0]

    with pytest.raises(SystemExit):
        run_guarded(interrupted_after(capped))
    assert capsys.readouterr().err.strip() == "hpcai-launch: interrupted; power limits restored"
    assert [d["current_limit_w"] for d in fgs.read_state(state)["devices"]] == [700.0, 700.0]


def test_a_signal_without_limits_says_only_the_signal(fresh, capsys):
    def signalled():
        raise Interrupted(15)

    with pytest.raises(SystemExit):
        run_guarded(signalled)
    err = capsys.readouterr().err
    assert "restored" not in err and err.startswith("hpcai-launch: ")
