"""Resume measures again a slot whose result completed but failed a validity
check (issue 25): that cap would otherwise have no figure for good. The failed
attempt stays in its folder, listed beside the new one. Real PyTorch on the
CPU, a node without GPUs."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow
ARGS = ["resnet50", "--preset", "tiny", "--nproc", "1", "--repeat", "2", "--steps-per-epoch", "1",
        "--warmup-epochs", "0", "--epochs", "1", "--idle-s", "0", "--ci-target", "off"]


@pytest.mark.timeout(1800)  # three tiny runs; a loaded 2-core machine makes each minutes long
def test_a_slot_that_failed_validity_is_measured_again_on_resume(cpu_node):
    node = cpu_node
    first = node.launch(*ARGS, "-o", str(node.results), timeout=1200)
    assert first.returncode == 0, first.stderr
    (folder,) = [p for p in node.results.iterdir() if p.name.startswith("sweep-")]
    summary = json.loads((folder / "sweep.json").read_text())
    kept, other = summary["runs"][0]["run_id"], summary["runs"][1]["run_id"]
    # The launcher's verdict on the first run, as a failed check would leave it
    # (the report leaves such a result out of every figure).
    path = folder / kept / "result.json"
    doc = json.loads(path.read_text())
    doc["validity"]["checks"].append({"name": "slow_epoch", "subject": "run", "value": 0.2,
                                      "unit": "fraction", "threshold": ">= 80%", "verdict": "fail",
                                      "note": "crafted by the test"})
    doc["validity"].update(verdict="fail", failed=["slow_epoch"])
    path.write_text(json.dumps(doc))

    again = node.launch(*ARGS, "-o", str(node.results), timeout=1200)
    assert again.returncode == 0, again.stderr
    summary = json.loads((folder / "sweep.json").read_text())
    runs = {r["repeat"]: r for r in summary["runs"]}
    first_slot = next(r for r in summary["runs"] if kept in [a["run_id"] for a in r["attempts"]])
    assert first_slot["skipped"] is False and first_slot["run_id"] != kept
    assert first_slot["status"] == "complete"
    assert {a["run_id"]: a.get("failed_checks") for a in first_slot["attempts"]} == \
        {kept: ["slow_epoch"], first_slot["run_id"]: None}
    other_slot = next(r for r in runs.values() if r is not first_slot)
    assert other_slot["skipped"] is True and other_slot["run_id"] == other
    assert path.exists()  # the failed attempt is kept beside the new one
