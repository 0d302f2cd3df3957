"""Where power cannot be measured (a CPU without readable RAPL), the terminal's summary
line says why in the result's words, and the report's first screen says so in one
sentence, pointing to what would measure it, instead of an empty "Best cap" table."""
import json

from hpcai.launcher.report import ReportOptions, make_report
from hpcai.launcher.run.single import _summarize
from report_docs import make_result, write_result

WHY = "RAPL counters intel-rapl:0 are readable only by root"


def cpu_run(preset="short", per_gpu=7.0):
    doc = make_result(device_type="cpu", gpus=2, cap_w=None, preset=preset, per_gpu=per_gpu)
    doc["power"]["reason"] = WHY
    return doc


def test_the_summary_line_says_why_power_was_not_measured(tmp_path, capsys):
    doc = cpu_run()
    assert not doc["power"]["available"]
    (tmp_path / "result.json").write_text(json.dumps(doc))
    assert _summarize(doc, tmp_path) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert f"power not measured ({WHY})" in line, line


def test_the_first_screen_says_why_instead_of_an_empty_best_cap_table(tmp_path):
    results = tmp_path / "results"
    write_result(results, cpu_run("short", 7.0))
    write_result(results, cpu_run("tiny", 2.0))
    written = make_report([results], ReportOptions(output=tmp_path / "report"))
    md = (tmp_path / "report" / "report.md").read_text()
    best = md.split("## Best cap", 1)[1].split("\n## ", 1)[0]
    assert f"No best cap: power was not measured on CPU ({WHY})" in best
    assert "RAPL" in best and "GPU node" in best
    assert "|" not in best  # no table
    html = written["html"].read_text()
    assert html.index("No best cap: power was not measured") < html.index("Throughput per GPU")
    assert 'data-table="recommendations"' not in html


def test_with_some_power_measured_the_table_stays(tmp_path):
    results = tmp_path / "results"
    write_result(results, cpu_run())
    write_result(results, make_result(cap_w=300.0))
    make_report([results], ReportOptions(output=tmp_path / "report"))
    best = (tmp_path / "report" / "report.md").read_text().split("## Best cap", 1)[1].split("\n## ", 1)[0]
    assert "No best cap: power was not measured on" not in best and "| resnet50 |" in best
