"""The plan's files: plan.json (every figure with its interval), plan.md and
plan.html (the same as tables, through the report's table code) and policy.toml
(the site file's [policy] section, format in docs/how-to/choosing-gpus-and-caps.md).
Written by descriptor into the plan's folder, never through a link (safe_files)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import datetime, timezone

from hpcai.launcher.planner.curves import setting_kind, setting_text
from hpcai.launcher.report.html import page
from hpcai.launcher.report.outputs import table_markdown
from hpcai.launcher.report.tables import Table, TCell, fmt

METHOD = [
    "Fixed work: each class does its share of the partition's GPU-hours at its fastest setting; "
    "a setting is judged by the energy, cost or CO2 of doing exactly that work, within each "
    "class's max_slowdown of its fastest measured cap.",
    "Intervals: 95% intervals of the repeats' means (Student's t; a single run's epochs where "
    "there is one run), carried through by interval arithmetic (conservative).",
    "Cost per unit: the GPU's purchase price over its lifetime at full use, plus facility energy "
    "(node energy with overhead x PUE) x the energy price. Prices are the plan's --prices, "
    "never the ones recorded in the results.",
    "The paper's rows (--reference): throughput as published, power assumed at the cap plus the "
    "paper's 100 W per 4-GPU node (the rows carry no power); marked source \"paper\".",
]


def _range(record: dict | None, digits: int = 4) -> str:
    if not record:
        return "–"
    value, (lo, hi) = record["value"], record["ci95"]
    if lo == hi == value:
        return fmt(value, digits)
    return f"{fmt(value, digits)} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def _t(text) -> TCell:
    return TCell(str(text))


def procurement_table(plan: dict, objective: str) -> Table:
    header = ["Rank", "GPU", "Class", "Setting", "Source", "Per GPU (units/s)", "Per node",
              "Work per kWh", "Cost per unit", "Node power (kW)", f"{objective} per mix-hour",
              "Missing classes"]
    rows = []
    for model in plan["procurement"]:
        for name, figures in model["classes"].items():
            (kind, value), = figures["setting"].items()
            rows.append([_t(model["rank"]), TCell(model["gpu"], best=model["rank"] == 1), _t(name),
                         _t(setting_text(kind, value)), _t(figures["source"]),
                         _t(_range(figures["throughput_per_gpu"])), _t(_range(figures["throughput_per_node"])),
                         _t(_range(figures["work_per_kwh"])), _t(_range(figures["cost_per_unit"])),
                         _t(_range(figures["power_per_node_kw"])),
                         _t(_range(model["per_mix_hour"][objective])),
                         _t(", ".join(model["missing_classes"]) or "–")])
    return Table("procurement", "GPU models for the mix, best first", header, rows,
                 ["Figures: value [95% interval]. Nodes for --target and their power: plan.json."])


def partitions_table(plan: dict) -> Table:
    header = ["Partition", "GPU", "Default cap", "Energy saved", "Cost saved", "CO2 saved",
              "Throughput lost", "Overrides", "Note"]
    rows = []
    for e in plan["partitions"]:
        p = e.get("predicted", {})
        over = "; ".join(f"{o['class']}: " + setting_text(setting_kind(o), o[setting_kind(o)])
                         for o in e.get("overrides", []))
        rows.append([_t(e["partition"]), _t(e["gpu"]),
                     _t("–" if e["default_cap_w"] is None else f"{e['default_cap_w']:g} W"),
                     *(_t(_range(p.get(k))) for k in ("energy_saved", "cost_saved", "co2_saved", "throughput_lost")),
                     _t(over or "–"), _t(e.get("note") or ", ".join(e["missing_classes"]) and
                                        f"not measured: {', '.join(e['missing_classes'])}" or "")])
    return Table("partitions", "Partition default caps per GPU model", header, rows,
                 ["Saved and lost: fractions against every class at its fastest setting, for the mix's fixed work."])


def sensitivity_table(plan: dict) -> Table:
    rows = [[_t(r["input"]), _t(r["best_gpu"]),
             _t(", ".join(f"{k} {v:g} W" for k, v in r["default_caps"].items() if v is not None)),
             TCell(", ".join(r["changed"]) or "nothing", best=bool(r["changed"]))] for r in plan["sensitivity"]]
    return Table("sensitivity", "Which inputs change the answer (±20%)",
                 ["Input moved", "Best GPU", "Default caps", "Changed"], rows)


def _headline(plan: dict) -> list[str]:
    if not plan["procurement"]:
        return ["No GPU model could be ranked."]
    best = plan["procurement"][0]
    caps = ", ".join(f"{e['partition']} on {e['gpu']}: {e['default_cap_w']:g} W"
                     for e in plan["partitions"] if e["gpu"] == best["gpu"] and e["default_cap_w"] is not None)
    paper = sorted(name for name, figures in best["classes"].items() if figures["source"] == "paper")
    caveats = ([f"lacks {', '.join(best['missing_classes'])}"] if best["missing_classes"] else []) + (
        [f"{', '.join(paper)} from the paper's rows"] if paper else [])
    return [f"Buy: {best['gpu']}" + (f" ({'; '.join(caveats)})" if caveats else "") + ".",
            f"Default caps: {caps or 'none could be chosen'}."]


def production_table(plan: dict) -> Table:
    """Each class's GPU energy per GPU-hour in production (receipts) beside the
    benchmark's at the policy's setting; a large gap says the benchmark does not
    represent the class."""
    rows = [[_t(r["class"]), _t(r["gpu"]), _t(setting_text(*next(iter(r["setting"].items())))),
             _t(f"{r['production_wh_per_gpu_hour']:.4g}"), _t(f"{r['benchmark_wh_per_gpu_hour']:.4g}"),
             _t(f"{r['ratio']:.2f}"),
             _t("the benchmark does not represent this class" if r["flagged"] else "")] for r in plan["production"]]
    return Table("production", "Production (job receipts) against the benchmark",
                 ["Class", "GPU", "Setting", "Production Wh/GPU-h", "Benchmark Wh/GPU-h", "Ratio", "Flag"], rows,
                 notes=["GPU energy only (the GPUs' counters), per GPU-hour; the benchmark's at the setting the "
                        "policy runs the class at; flagged beyond 25% apart."])


def policy_toml(plan: dict, digest: str, made: str) -> str:
    lines = ["[policy]", f'plan = "sha256:{digest}"', f'made = "{made}"', ""]
    for e in plan["partitions"]:
        if e["default_cap_w"] is None:
            continue
        lines += ["[[policy.default]]", f"partition = {json.dumps(e['partition'])}",
                  f"gpu = {json.dumps(e['gpu'])}", f"cap_w = {float(e['default_cap_w'])!r}", ""]
        for o in e.get("overrides", []):
            kind = setting_kind(o)
            value = {"cap_w": lambda v: repr(float(v)), "sm_clock_mhz": lambda v: repr(int(v)),
                     "power_profile": json.dumps}[kind](o[kind])  # TOML's string is JSON's
            lines += ["[[policy.override]]", f"partition = {json.dumps(e['partition'])}",
                      f"gpu = {json.dumps(e['gpu'])}", f"class = {json.dumps(o['class'])}",
                      f"{kind} = {value}", ""]
    return "\n".join(lines)


def write_plan(out, plan: dict, classes: list, prices, knobs, opts, paths: list) -> dict:
    from hpcai.safe_files import Folder

    made = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = {"kind": "hpcai.plan", "made": made, "inputs": _inputs(classes, prices, knobs, opts, paths),
           "method": METHOD, **plan}
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    tables = [procurement_table(plan, knobs.objective), partitions_table(plan), sensitivity_table(plan)]
    sections = [("Procurement", [tables[0]]), ("Partitions", [tables[1]]), ("Sensitivity", [tables[2]]),
                ("Production", [production_table(plan)] if plan.get("production") else []),
                ("Left out", list(plan["left_out"]) + [f"{n['class']} on {n['gpu']}: {n['note']}" for n in plan["knob_notes"]]),
                ("Method", METHOD)]
    meta = _headline(plan) + [f"Objective: {knobs.objective}; made {made}."]
    markdown = "\n".join(["# hpcai plan", "", *(f"{m}  " for m in meta), ""] + [
        f"## {heading}\n\n" + "\n".join(table_markdown(i) if isinstance(i, Table) else f"- {i}" for i in items) + "\n"
        for heading, items in sections if items])
    with Folder.open(out) as folder:
        paths_written = {"json": folder.write_text("plan.json", text),
                         "markdown": folder.write_text("plan.md", markdown),
                         "html": folder.write_text("plan.html", page("hpcai plan", meta, sections)),
                         "policy": folder.write_text("policy.toml", policy_toml(plan, digest, made))}
    return {"paths": paths_written, "headline": _headline(plan)}


def _inputs(classes: list, prices, knobs, opts, paths: list) -> dict:
    return {"results": [str(p) for p in paths], "mix": [dataclasses.asdict(c) for c in classes],
            "prices": {**dataclasses.asdict(prices), "gpus": {k: dataclasses.asdict(g) for k, g in prices.gpus.items()}},
            "objective": knobs.objective, "max_slowdown": knobs.max_slowdown, "budget_kw": knobs.budget_kw,
            "targets": dict(knobs.targets), "reference": opts.reference}
