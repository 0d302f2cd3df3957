"""`hpcai-launch info` lists every workload with whether its software stack is
installed on this host's Python and whether its image is here (issue 15 §3)."""
import importlib.util
import json
from pathlib import Path

from hpcai.workloads.catalog import WORKLOADS


def test_info_lists_each_workload_with_its_stack_and_image(cpu_node):
    done = cpu_node.launch("info", "--json")
    assert done.returncode == 0, done.stderr
    rows = {(r["workload"], r["impl"]): r for r in json.loads(done.stdout)["workloads"]}
    assert set(rows) == {(w.name, i) for w in WORKLOADS.values() for i in w.impls}
    for row in rows.values():
        # Checked against this very interpreter (the tests run the launcher with it).
        missing = [m for m in row["modules"] if importlib.util.find_spec(m) is None]
        assert row["missing"] == missing and row["host"] == (not missing)
        # The image of its family, where this site keeps images (none, unless built).
        assert row["image"] is None or Path(row["image"]).is_file()
    assert rows[("resnet50", "tensorflow")]["modules"] == ["tensorflow"]
    assert rows[("sd2", "pytorch")]["modules"] == ["torch", "diffusers", "transformers"]
    assert rows[("llama3-8b-inference", "sglang")]["image_family"] == "llm-serve"


def test_info_text_names_missing_packages_and_the_extra(cpu_node):
    done = cpu_node.launch("info")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "llama3-8b-inference (sglang)" in line]
    assert len(lines) == 1
    if importlib.util.find_spec("sglang") is None:  # CI and CPU machines: never installed
        assert "missing sglang (pip install '.[serve]' from the hpcai checkout)" in lines[0]
    else:
        assert "host: installed" in lines[0]
    assert "image llm-serve: absent" in lines[0] or "image llm-serve: present" in lines[0]
