"""`hpcai-launch fleet report`: the fleet section as its own output folder.

    fleet.json    the whole analysis (per GPU, per cap, the spread, drift)
    outliers.csv  one row per reason of every GPU that did not pass (ticketing)
    gpus.csv      every GPU's figures and z-scores per cap
    spread.csv    median, MAD and robust CV per metric and cap
    fleet.md      the verdicts, the outlier table, the spread per cap, drift
    plots/        heat maps (nodes x GPUs) per metric and cap, distributions per cap
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import click

from hpcai.launcher.fleet.analysis import Settings, analyse, outliers
from hpcai.launcher.fleet.campaign import safe_dir
from hpcai.launcher.fleet.metrics import METRICS
from hpcai.install import install_hint


def build(campaigns: list[str], output: str | None, as_json: bool, settings: Settings,
          baseline: list[str] | None = None) -> int:
    from hpcai.launcher.fleet.records import load

    opened, records = load(campaigns)
    caps = sorted({c for camp in opened for c in camp.caps})
    earlier = None
    if baseline:
        before, earlier = load(baseline)
        if before[0].workload != opened[0].workload:
            from hpcai.errors import UsageError

            raise UsageError(f"baseline {before[0].folder} measured {before[0].workload}, "
                             f"the campaign {opened[0].workload}",
                             "give an earlier campaign of the same workload as --baseline")
    doc = analyse(records, caps, settings, earlier,
                  {str(c.folder): c.caps for c in opened})
    seen = {r.node for r in records}
    missing = sorted({n for c in opened for n in c.doc.get("expected_nodes") or []
                      if n not in seen})
    doc.update(workload=opened[0].workload, preset=opened[0].doc.get("preset"),
               campaigns=[str(c.folder) for c in opened], baseline=baseline or None,
               nodes_not_measured=missing)
    if output:
        write(Path(output), doc)
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        print_summary(doc, output)
    # A node the campaign was to measure that measured nothing is not accepted either.
    return 1 if doc["summary"]["fail"] or missing else 0


def write(folder: Path, doc: dict) -> None:
    safe_dir(folder, "report folder")
    (folder / "fleet.json").write_text(json.dumps(doc, indent=2) + "\n")
    _csv(folder / "outliers.csv", outliers(doc),
         ["node", "index", "uuid", "serial", "gpu_verdict", "verdict", "cap_w", "metric", "reason"])
    _csv(folder / "gpus.csv", gpu_rows(doc),
         ["node", "index", "uuid", "serial", "verdict", "selftest", "cap_w", *METRICS,
          *(f"z_{m}" for m in METRICS), "cap_enforced", "thermal_throttle_share",
          "energy_counter_disagreement"])
    _csv(folder / "spread.csv", spread_rows(doc),
         ["cap_w", "metric", "n", "median", "mad", "robust_cv", "p05", "p95", "min", "max"])
    plots: list[Path] = []
    try:
        from hpcai.launcher.fleet.plots import make_plots

        plots = make_plots(folder / "plots", doc)
    except ImportError:
        click.echo(f"note: matplotlib is not installed: no plots ({install_hint('report')})",
                   err=True)
    (folder / "fleet.md").write_text(markdown(doc, [p.relative_to(folder) for p in plots]))


def _csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def gpu_rows(doc: dict) -> list[dict]:
    rows = []
    for g in doc["gpus"]:
        for cap, fig in g["caps"].items():
            rows.append({"node": g["node"], "index": g["index"], "uuid": g["uuid"],
                         "serial": g["serial"], "verdict": g["verdict"],
                         "selftest": (g.get("selftest") or {}).get("verdict"), "cap_w": cap,
                         **{m: fig.get(m) for m in METRICS},
                         **{f"z_{m}": g["z"].get(cap, {}).get(m) for m in METRICS},
                         "cap_enforced": fig.get("cap_enforced"),
                         "thermal_throttle_share": fig.get("thermal_throttle_share"),
                         "energy_counter_disagreement": fig.get("energy_counter_disagreement")})
    return rows


def spread_rows(doc: dict) -> list[dict]:
    return [{"cap_w": cap, "metric": m, **s} for cap, per in doc["spread"].items()
            for m, s in per.items()]


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def markdown(doc: dict, plots: list[Path]) -> str:
    s = doc["summary"]
    lines = [f"# Fleet acceptance: {doc.get('workload')} ({doc.get('preset')})", "",
             f"{s['gpus']} GPU(s): {s['pass']} pass, {s['warn']} warn, {s['fail']} fail. "
             f"Caps: {', '.join(f'{c:g} W' for c in doc['caps_w'])}. Outlier: |robust z| > "
             f"{doc['settings']['threshold']:g} (Iglewicz-Hoaglin), scale at least "
             f"{doc['settings']['min_spread']:.1%} of the median.", "",
             *[f"Note: {line}." for line in doc.get("small_sets") or []], "",
             "## GPUs that did not pass", ""]
    rows = outliers(doc)
    for node in doc.get("nodes_not_measured") or []:
        lines.append(f"- node {node}: no GPU measured (`hpcai-launch fleet status` says why)")
    if rows:
        # The serial is what a ticket to the vendor names (null: the library cannot say).
        lines += ["| node | GPU | UUID | serial | verdict | reason |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['node']} | {r['index']} | {r['uuid']} | {r['serial'] or '-'} | "
                  f"{r['verdict']} | {r['reason']} |" for r in rows]
    else:
        lines.append("None: every GPU passed.")
    lines += ["", "## Spread per cap", "",
              "Robust coefficient of variation (1.4826 MAD / median) per metric: how "
              "variability grows as the cap falls.", "",
              "| cap | " + " | ".join(METRICS[m][0] for m in METRICS) + " |",
              "|---|" + "---|" * len(METRICS)]
    for cap, per in sorted(doc["spread"].items(), key=lambda kv: float(kv[0])):
        cells = [(f"{per[m]['robust_cv']:.2%}" if m in per and per[m]["robust_cv"] is not None
                  else "-") for m in METRICS]
        lines.append(f"| {cap} W | " + " | ".join(cells) + " |")
    drift = doc.get("drift")
    if drift:
        lines += ["", "## Drift against the earlier campaign", "",
                  f"{drift['matched']} GPU(s) matched by UUID, {drift['new']} new, "
                  f"{drift['gone']} gone. Moved most (throughput):", "",
                  "| node | GPU | UUID | largest throughput change |", "|---|---|---|---|"]
        for row in drift["gpus"][:doc["settings"]["moved_most"]]:
            lines.append(f"| {row['node']} | {row['index']} | {row['uuid']} | "
                         f"{row['largest_throughput_change']:.1%} |")
    if plots:
        lines += ["", "## Figures", ""] + [f"![{p.stem}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def print_summary(doc: dict, output: str | None) -> None:
    s = doc["summary"]
    click.echo(f"fleet {doc['workload']}: {s['gpus']} GPU(s), {s['pass']} pass, "
               f"{s['warn']} warn, {s['fail']} fail")
    for node in doc.get("nodes_not_measured") or []:
        click.echo(f"  FAIL {node}: no GPU measured (hpcai-launch fleet status says why)")
    for g in doc["gpus"]:
        if g["verdict"] != "pass":
            why = "; ".join(r["text"] for r in g["reasons"])
            serial = f" serial {g['serial']}" if g.get("serial") else ""
            click.echo(f"  {g['verdict'].upper():<4} {g['node']} gpu{g['index']} {g['uuid']}"
                       f"{serial}: {why}")
    for cap, per in sorted(doc["spread"].items(), key=lambda kv: float(kv[0])):
        tp = per.get("throughput")
        if tp and tp["robust_cv"] is not None:
            click.echo(f"  spread at {cap} W: throughput robust CV {tp['robust_cv']:.2%} "
                       f"over {tp['n']} GPU(s)")
    for line in doc.get("small_sets") or []:
        click.echo(f"  note: {line}")
    if output:
        click.echo(f"report: {Path(output) / 'fleet.md'} (CSV for ticketing: "
                   f"{Path(output) / 'outliers.csv'})")
