"""One tolerance for "the limit in force matches the cap" (hpcai/gpu/base.py
LIMIT_MATCH_W): validity's enforced_limit check, the cap session's read-back
(through the FAKE NVML), the sudo helper and the job receipts all read it, and
no module keeps a number of its own."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fakes import fake_gpu_state as fgs
from hpcai.errors import CapNotAppliedError
from hpcai.gpu.base import LIMIT_MATCH_W
from hpcai.measure import validity

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("hpcai", "launcher", "workloads")
TOLERANCE_NAME = re.compile(r"(tolerance|match)_w$", re.IGNORECASE)


def _numbers_named_like_a_tolerance(path: Path) -> list[str]:
    """Names (assignments, defaults, dict keys) ending in tolerance_w / match_w given a number."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        pairs = []
        if isinstance(node, ast.Assign):
            pairs = [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs = [(node.target.id, node.value)]
        elif isinstance(node, ast.arguments):
            named = node.posonlyargs + node.args
            pairs = list(zip([a.arg for a in named[len(named) - len(node.defaults):]], node.defaults))
            pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
        elif isinstance(node, ast.Dict):
            pairs = [(k.value, v) for k, v in zip(node.keys, node.values)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        found += [name for name, value in pairs if TOLERANCE_NAME.search(name)
                  and isinstance(value, ast.Constant) and isinstance(value.value, (int, float))]
    return found


def test_no_module_keeps_a_limit_tolerance_of_its_own():
    owners = {f"{path.relative_to(ROOT)}:{name}"
              for folder in PRODUCT for path in sorted((ROOT / folder).rglob("*.py"))
              for name in _numbers_named_like_a_tolerance(path)}
    assert owners == {"hpcai/gpu/base.py:LIMIT_MATCH_W"}


def test_validity_the_helper_and_the_receipts_read_the_one_tolerance():
    from hpcai.launcher.power import helper

    assert validity.THRESHOLDS["limit_match_w"] is LIMIT_MATCH_W
    assert helper.LIMIT_MATCH_W is LIMIT_MATCH_W


def _capped_doc(enforced_at_end_w: float) -> dict:
    return {"spec": {"power": {"cap_w": 300.0}}, "gpus": [],
            "launcher": {"gpu_limits": [{"index": 0, "requested_w": 300.0, "enforced_at_start_w": 300.0,
                                         "enforced_at_end_w": enforced_at_end_w}]}}


@pytest.mark.parametrize("off, verdict", [(0.5, "pass"), (1.5, "fail")])
def test_validity_passes_a_limit_within_the_tolerance_and_fails_one_beyond(off, verdict):
    (check,) = validity._enforced_limits(_capped_doc(300.0 - off * LIMIT_MATCH_W), validity.THRESHOLDS)
    assert check["verdict"] == verdict


@pytest.mark.parametrize("off, who", [(0.5, "default"), (1.5, "someone else")])
def test_a_receipt_calls_a_cap_within_the_tolerance_of_the_default_the_default(tmp_path, off, who):
    from hpcai.launcher.receipts.gpus import cap_set_by

    root = tmp_path / "authority"
    root.mkdir(mode=0o700)
    assert cap_set_by("GPU-x", 700.0 - off * LIMIT_MATCH_W, 700.0, "1", None, root=root) == who


def test_the_cap_session_takes_an_enforced_limit_within_the_tolerance_and_refuses_one_beyond(tmp_path, monkeypatch):
    from hpcai.launcher.power.backends import make_backend
    from hpcai.launcher.power.session import CapSession

    devices = fgs.make_devices(2, "nvidia")
    devices[0]["enforced_limit_w"] = 300.0 - 0.5 * LIMIT_MATCH_W  # a BMC's limit just below the cap
    devices[1]["enforced_limit_w"] = 300.0 - 1.5 * LIMIT_MATCH_W
    fgs.install(monkeypatch, tmp_path / "gpus.json", devices)
    backend = make_backend("nvml")
    try:
        with CapSession(backend, 300, [0], tmp_path / "journal-0.json") as session:
            assert session.gpus[0]["enforced_w"] == 300.0 - 0.5 * LIMIT_MATCH_W
        with pytest.raises(CapNotAppliedError):
            with CapSession(backend, 300, [1], tmp_path / "journal-1.json"):
                pytest.fail("entered")
    finally:
        backend.close()
