"""The seed paper's published throughput, read as published, and set beside ours.

The reference CSV says, per row, what the number is: `basis` per_gpu (the
vision rows: single-GPU jobs) or node_4gpu (the LLM rows: a 4-GPU node's
total, LitGPT's items_per_sec and one SGLang server with --tp 4), and the
precision, batch and (inference) request mix the paper ran. The report's
tables are per GPU, so node rows are divided by their GPUs there, with a
footnote saying so.

Ours / paper ratios are printed only where the workload, GPU and cap match
and our cell ran the paper's configuration (a `paper` preset run as it says:
result.comparability.comparable_to_paper); elsewhere the row says why the
two are not comparable.
"""
from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path

from hpcai.errors import ConfigError

REFERENCE_FILE = "reference/seed-paper-throughput.csv"
BASE_COLUMNS = ["workload", "gpu", "cap_w", "throughput", "unit", "enforced"]
DESCRIBED_COLUMNS = [*BASE_COLUMNS, "basis", "precision", "batch", "request_mix"]
BASIS_GPUS = {"per_gpu": 1, "node_4gpu": 4}
UNITS = ("images/s", "samples/s", "tokens/s")


def read_reference(path: str | Path | None = None) -> list:
    """The packaged CSV (or another: the six base columns, or those plus
    basis, precision, batch and request_mix); '#' lines are comments. A file
    without `basis` is read as per GPU, as before."""
    from hpcai.launcher.report.points import RefPoint

    if path is None:
        text = resources.files("hpcai").joinpath(REFERENCE_FILE).read_text()
        where = f"hpcai/{REFERENCE_FILE}"
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read reference file {path} ({exc.strerror})",
                              "check the path given to --reference-file") from None
        where = str(path)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ConfigError(f"reference file {where} has no rows", f"columns: {DESCRIBED_COLUMNS}")
    header = [h.strip() for h in next(csv.reader([lines[0][1]]))]
    if header not in (BASE_COLUMNS, DESCRIBED_COLUMNS):
        raise ConfigError(f"reference file {where} has columns {header}",
                          f"expected {','.join(DESCRIBED_COLUMNS)} (or the first six)")
    points = []
    for number, line in lines[1:]:
        cells = [c.strip() for c in next(csv.reader([line]))]
        try:
            if len(cells) != len(header):
                raise ValueError(f"{len(cells)} fields")
            row = dict(zip(header, cells))
            unit, enforced = row["unit"], row["enforced"]
            if unit not in UNITS or enforced not in ("true", "false"):
                raise ValueError(f"unit {unit!r} or enforced {enforced!r}")
            basis = row.get("basis", "per_gpu")
            if basis not in BASIS_GPUS:
                raise ValueError(f"basis {basis!r} (one of: {', '.join(BASIS_GPUS)})")
            point = RefPoint(row["workload"], row["gpu"], float(row["cap_w"]),
                             float(row["throughput"]), unit, enforced == "true", basis=basis,
                             gpus=BASIS_GPUS[basis], precision=row.get("precision", ""),
                             batch=row.get("batch", ""), request_mix=row.get("request_mix", ""),
                             published=row["throughput"].strip())
            if point.cap_w <= 0 or point.throughput < 0:
                raise ValueError("negative number")
        except ValueError as exc:
            raise ConfigError(f"reference file {where} line {number} is malformed ({exc})",
                              "fix the line or leave it out") from None
        points.append(point)
    return points


# ---- comparing our cells with the paper's rows ---------------------------------------
def cell_comparability(cell) -> tuple[bool, str | None]:
    """Whether a cell ran the paper's configuration; if not, why, in a few words."""
    reasons = []
    for run in cell.runs:
        comparable = getattr(run, "comparable_to_paper", None)
        if comparable is None:
            reasons.append(f"preset {run.preset!r}: result records no comparability "
                           "(it predates the paper presets)")
        elif not comparable:
            reasons.append((run.comparability_reasons
                            or [f"a {run.preset_kind or run.preset} preset"])[0])
    return (not reasons, reasons[0] if reasons else None)


def matching_point(refs: list, workload_key: str, gpu: str, cap_w: float | None):
    from hpcai.launcher.report.points import workload_key as key
    from hpcai.measure import gpu_names

    for p in refs:
        if key(p.workload) == workload_key and gpu_names.normalize(p.gpu) == gpu_names.normalize(gpu) \
                and cap_w is not None and abs(p.cap_w - cap_w) < 0.5:
            return p
    return None


def like_for_like(cell) -> tuple[float | None, str]:
    """Our per-GPU throughput as the paper's scripts account it (result
    power.paper_accounting: the mean of the epochs' rates), where every run of
    the cell recorded it; else hpcai's own (units over time). The name says which."""
    accounted = [((r.power_doc or {}).get("paper_accounting") or {}).get("throughput_per_gpu")
                 for r in cell.runs]
    if accounted and all(a is not None for a in accounted):
        return sum(accounted) / len(accounted), "paper's accounting"
    return cell.throughput, "hpcai's accounting"


def ratio_text(ours: float | None, point) -> tuple[str, float | None]:
    if ours is None or point is None or not point.per_gpu:
        return "–", None
    ratio = ours / point.per_gpu
    return f"{ratio:.2f}×", ratio


def notes(refs: list, with_ours: bool = True) -> list[str]:
    """Footnotes for the reference rows: their basis, and what the paper ran."""
    if not refs:
        return []
    out = ["Rows marked (paper): the seed paper's published throughput (Tables 3 and 4), per GPU."]
    node = [p for p in refs if p.gpus > 1]
    if node:
        example = next((p for p in node if p.workload == "llama3-8b-pretrain"
                        and p.gpu == "H100" and p.cap_w == 700), node[0])
        out.append(
            f"The paper's LLM rows are totals of a {node[0].gpus}-GPU node (LitGPT's "
            "items_per_sec over FSDP; one SGLang server with --tp 4), divided here by "
            f"{node[0].gpus} to put them per GPU: e.g. {example.workload} on {example.gpu} at "
            f"{example.cap_w:g} W, {example.throughput:,.0f} {example.unit} per node = "
            f"{example.per_gpu:,.0f} per GPU.")
    described: dict[str, dict[str, list[str]]] = {}
    for p in refs:
        text = "; ".join(x for x in (p.precision and f"precision {p.precision}",
                                     p.batch and f"batch {p.batch}",
                                     p.request_mix and f"requests {p.request_mix}") if x)
        if text:
            gpus = described.setdefault(p.workload, {}).setdefault(text, [])
            if p.gpu not in gpus:
                gpus.append(p.gpu)
    for workload, texts in described.items():
        parts = [text if len(texts) == 1 else f"{', '.join(gpus)}: {text}"
                 for text, gpus in texts.items()]
        out.append(f"The paper's {workload}: " + " | ".join(parts) + ".")
    if with_ours:
        out.append("Ours / paper (in brackets beside our cells): our per-GPU throughput over "
                   "the paper's, where the workload, GPU and cap match and our run is the "
                   "paper's configuration (`--preset paper`, nothing overridden); otherwise a "
                   "note says why there is no ratio. Like for like: ours as the paper's "
                   "scripts account it (mean of the epochs' rates, result "
                   "power.paper_accounting) where the result records it, marked "
                   "\"paper acct.\"; hpcai's own accounting otherwise.")
    return out
