"""The seed paper's reference read as published: node rows put per GPU in the
report's per-GPU tables, with a footnote; ours / paper only where the
configurations are the same, and why not where they are not."""
import json
import subprocess
import sys

import pytest

from conftest import LAUNCHER, ROOT
from hpcai.errors import ConfigError
from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.report.load import load_reference
from report_docs import make_result, write_result


def rows_of(table: dict) -> dict:
    return {(r[0], r[1]): r[2:] for r in table["rows"]}


def test_a_report_over_the_reference_alone_puts_the_llm_rows_per_gpu(tmp_path):
    """`hpcai-launch report --reference` on a folder without results: the
    paper's H100 700 W pretraining figure, 30,271 tok/s for a 4-GPU node, reads
    7,568 tok/s per GPU, and the footnote says why."""
    (tmp_path / "results").mkdir()
    done = subprocess.run([*LAUNCHER, "report", str(tmp_path / "results"), "--reference",
                           "-o", str(tmp_path / "report")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    table = doc["tables"]["throughput-tokens"]
    assert table["title"] == "Language workloads (tokens/s per GPU)"
    rows = rows_of(table)
    caps = table["header"][2:]
    pretrain = dict(zip(caps, rows[("llama3-8b-pretrain", "H100 (paper)")]))
    assert pretrain["700 W"] == "7567.8"  # 30,271 / 4
    inference = dict(zip(caps, rows[("llama3-8b-inference", "H200 (paper)")]))
    assert inference["700 W"] == "604.38"  # 2,417.5 / 4
    assert any("30,271 tokens/s per node = 7,568 per GPU" in n for n in table["notes"])
    # Vision rows were per GPU already: unchanged.
    vision = rows_of(doc["tables"]["throughput-images"])
    assert vision[("resnet50", "H100 (paper)")][-2] == "1479.3"
    md = (tmp_path / "report" / "report.md").read_text()
    assert "7567.8" in md and "30271" not in md


def test_reference_rows_say_what_the_paper_ran():
    points = load_reference()
    pretrain = next(p for p in points if p.workload == "llama3-8b-pretrain")
    assert (pretrain.basis, pretrain.gpus, pretrain.precision) == ("node_4gpu", 4, "bf16-true")
    assert "global 64" in pretrain.batch
    serve = next(p for p in points if p.workload == "llama3-8b-inference" and p.gpu == "H100")
    assert "2048 prompts" in serve.request_mix and "0-1024" in serve.request_mix
    vit = next(p for p in points if p.workload == "vit-l16" and p.gpu == "H100")
    assert vit.basis == "per_gpu" and vit.per_gpu == vit.throughput and "256" in vit.batch
    assert all(p.basis == "node_4gpu" for p in points if p.workload.startswith("llama3"))
    assert all(p.basis == "per_gpu" for p in points if not p.workload.startswith("llama3"))


def comparability(kind="paper", comparable=True, reasons=()):
    return {"preset_kind": kind, "comparable_to_paper": comparable,
            "reasons": list(reasons) or ([] if comparable else ["fast preset"])}


def test_ratios_only_beside_comparable_cells(tmp_path, result_schema):
    import jsonschema

    results = tmp_path / "results"
    paper = make_result(workload="llama3-8b-pretrain", unit="tokens", cap_w=700.0,
                        per_gpu=7000.0, gpus=4)
    paper["comparability"] = comparability()
    fast = make_result(workload="llama3-8b-pretrain", preset="fast", unit="tokens",
                       cap_w=700.0, per_gpu=9000.0, gpus=4)
    fast["comparability"] = comparability("fast", False, [
        "preset 'fast' is hpcai's best configuration, not the paper's workload (use --preset paper)"])
    for doc in (paper, fast):
        jsonschema.validate(doc, result_schema)
        write_result(results, doc)
    make_report([results], ReportOptions(output=tmp_path / "report", reference=True))
    table = json.loads((tmp_path / "report" / "report.json").read_text())["tables"][
        "throughput-tokens"]
    rows = rows_of(table)
    caps = table["header"][2:]
    ours = dict(zip(caps, rows[("llama3-8b-pretrain", "H100 ×4")]))
    assert ours["700 W"] == "7000 [0.92× paper]"  # 7000 / 7567.75
    theirs = dict(zip(caps, rows[("llama3-8b-pretrain (fast)", "H100 ×4")]))
    assert theirs["700 W"] == "9000"  # no ratio: another configuration
    assert any(n.startswith("llama3-8b-pretrain (fast) on H100 ×4: not comparable with the "
                            "paper's row, so no ratio: preset 'fast' is hpcai's best")
               for n in table["notes"]), table["notes"]


def test_an_overridden_paper_run_gets_no_ratio_and_says_why(tmp_path):
    doc = make_result(cap_w=700.0, per_gpu=1500.0, gpus=1)
    doc["comparability"] = comparability(comparable=False, reasons=[
        "--batch-size 8 overrides the paper preset's 'auto'"])
    write_result(tmp_path / "results", doc)
    make_report([tmp_path / "results"], ReportOptions(output=tmp_path / "report", reference=True))
    table = json.loads((tmp_path / "report" / "report.json").read_text())["tables"][
        "throughput-images"]
    assert "[" not in " ".join(rows_of(table)[("resnet50", "H100 ×1")])
    assert any("--batch-size 8 overrides" in n for n in table["notes"])


def test_an_older_reference_file_without_basis_is_read_per_gpu(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("workload,gpu,cap_w,throughput,unit,enforced\n"
                    "llama3-8b-pretrain,H100,700,1000,tokens/s,true\n")
    (point,) = load_reference(path)
    assert point.basis == "per_gpu" and point.per_gpu == 1000


@pytest.mark.parametrize("line,fragment", [
    ("resnet50,H100,700,1,images/s,true,per_node,fp32,1,", "basis 'per_node'"),
    ("resnet50,H100,700,1,images/s,true,per_gpu,fp32", "8 fields"),
])
def test_a_malformed_described_row_is_a_config_error(tmp_path, line, fragment):
    path = tmp_path / "bad.csv"
    path.write_text("workload,gpu,cap_w,throughput,unit,enforced,basis,precision,batch,"
                    f"request_mix\n{line}\n")
    with pytest.raises(ConfigError, match=fragment):
        load_reference(path)


def test_reference_module_imports_nothing_heavy():
    code = ("import sys; import hpcai.launcher.report.reference\n"
            "print([m for m in ('torch', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
