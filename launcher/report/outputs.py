"""Markdown, CSV and JSON renderings of the report's tables and numbers."""
from __future__ import annotations

import contextlib
import csv
from pathlib import Path

from hpcai.launcher.report.efficiency import Analysis, edp_per_unit, fixed_work
from hpcai.launcher.report.long_tables import plain_csv_value, plain_csv_values
from hpcai.launcher.report.safe_text import csv_cell, csv_row
from hpcai.launcher.report.stats import Cell
from hpcai.launcher.report.tables import Table


def _md_escape(text: str) -> str:
    from hpcai.launcher.report.safe_text import md_text

    return md_text(text)


def table_markdown(table: Table) -> str:
    lines = [f"### {_md_escape(table.title)}", "",
             "| " + " | ".join(_md_escape(h) for h in table.header) + " |",
             "|" + "|".join("---" for _ in table.header) + "|"]
    for row in table.rows:
        cells = []
        for cell in row:
            text = _md_escape(cell.text)
            cells.append(f"**{text}**" if cell.best and text != "–" else text)
        lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines.extend(f"- {_md_escape(n)}" for n in table.notes)
    return "\n".join(lines) + "\n"


def write_table_csv(table: Table, folder: Path) -> Path:
    """Numbers as numbers, at full precision. In the cap tables each value column
    has two flag columns beside it ("noisy", "cap enforced") instead of the
    page's † and parentheses."""
    header, getters = [], []
    for i, name in enumerate(table.header):
        header.append(name)
        getters.append((i, _csv_value))
        if table.flag_columns and i >= 2 and name not in table.plain_columns:
            header += [f"{name} noisy", f"{name} cap enforced"]
            getters += [(i, lambda c: "" if c.value is None or c.reference else str(c.noisy).lower()),
                        (i, lambda c: "" if c.value is None else str(not c.unenforced).lower())]
    with _replacing(folder, f"{table.key}.csv") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        if table.flag_columns:
            writer.writerows([csv_cell(get(row[i])) for i, get in getters] for row in table.rows)
        else:  # a value per cell: made a row at a time
            writer.writerows(csv_row(plain_csv_values([c.text for c in row], [c.value for c in row]))
                             for row in table.rows)
        if table.more is not None:  # the rows beyond the first page, as columns
            assert not table.flag_columns, "long tables have no cap columns"
            writer.writerows(zip(*table.more.csv_columns()))
    return folder / f"{table.key}.csv"


@contextlib.contextmanager
def _replacing(folder: Path, name: str):
    """A text file in the report folder, never written through a planted link
    (hpcai/safe_files.py: the folder opened without following one, the file
    made new and renamed over the name)."""
    from hpcai.safe_files import Folder

    with Folder.open(folder) as opened, opened.replacing_text(name, newline="") as fh:
        yield fh


def _csv_value(cell) -> str:
    return plain_csv_value(cell.text, cell.value)


CELL_COLUMNS = [
    "workload", "preset", "device", "device_full", "device_type", "site", "gpus", "unit",
    "cap_w", "enforced", "repeats", "epochs", "throughput_per_gpu", "ci95_half_width", "n",
    "ci95_low", "ci95_high", "ci_from", "std", "cv", "noisy", "node_throughput", "node_power_w", "power_per_gpu_w",
    "units_per_joule_gpus", "units_per_joule_with_overhead", "energy_per_unit_j",
    "edp_per_unit_js", "sm_clock_mhz", "memory_clock_mhz", "most_efficient", "pareto",
    "recommended", "run_ids",
]


def cell_record(cell: Cell, analysis: Analysis | None, run_ids: list[str] | None = None) -> dict:
    """run_ids: the cell's runs' ids (given where the cell is a copy without its runs)."""
    s = cell.spread
    hw = s.half_width
    return {
        "workload": cell.group.workload, "preset": cell.group.preset,
        "point": cell.group.point or None,  # --vary: the grid point besides the GPUs
        "device": cell.group.device, "device_full": cell.group.device_full,
        "device_type": cell.group.device_type, "site": cell.group.site,
        "gpus": cell.group.processes, "unit": cell.group.unit, "cap_w": cell.cap_w,
        "enforced": cell.enforced, "repeats": cell.repeats.n, "epochs": cell.epochs.n,
        "throughput_per_gpu": cell.throughput, "std": s.std,
        # The interval is centred on the throughput shown (issue 15: one statistic).
        "ci95_half_width": hw, "n": s.n,
        "ci95_low": None if hw is None else cell.throughput - hw,
        "ci95_high": None if hw is None else cell.throughput + hw,
        "ci_from": cell.basis, "cv": s.cv, "noisy": cell.noisy, "noise": cell.noise,
        "node_throughput": cell.node_throughput, "node_power_w": cell.mean_power_w,
        "power_per_gpu_w": (cell.mean_power_w / cell.group.processes
                            if cell.mean_power_w is not None and cell.group.device_type == "cuda"
                            else None),
        "units_per_joule_gpus": cell.gpu_efficiency,
        "units_per_joule_with_overhead": cell.efficiency.mean,
        "energy_per_unit_j": cell.energy_per_unit_j, "edp_per_unit_js": edp_per_unit(cell),
        "sm_clock_mhz": cell.sm_clock_mhz, "memory_clock_mhz": cell.memory_clock_mhz,
        "most_efficient": analysis is not None and analysis.best is cell,
        "pareto": analysis is not None and analysis.is_pareto(cell),
        "recommended": analysis is not None and analysis.recommended is cell,
        "run_ids": [r.run_id for r in cell.runs] if run_ids is None else run_ids,
    }


def write_cells(records, folder: Path, json_file) -> Path:
    """cells.csv, and report.json's cells (json_stream.write_part into json_file), one
    record at a time: a fleet's tens of thousands of records are never held together."""
    from hpcai.launcher.report.json_stream import write_part

    path = folder / "cells.csv"
    with _replacing(folder, path.name) as fh:
        writer = csv.writer(fh)
        writer.writerow(CELL_COLUMNS)

        def each_in_the_csv_too():
            for rec in records:
                values = [rec[k] for k in CELL_COLUMNS]
                writer.writerow(csv_row(["" if v is None else " ".join(v) if isinstance(v, list)
                                         else v for v in values]))
                yield rec

        write_part(each_in_the_csv_too(), 1, json_file)
    return path


def analysis_record(a: Analysis, work: dict[str, float]) -> dict:
    def cap(cell):
        return None if cell is None else cell.cap_w

    rec = {"workload": a.group.workload, "preset": a.group.preset, "device": a.group.device,
           "device_full": a.group.device_full, "site": a.group.site, "gpus": a.group.processes,
           "unit": a.group.unit, "most_efficient_cap_w": cap(a.best),
           "fastest_cap_w": cap(a.fastest), "recommended_cap_w": cap(a.recommended),
           "least_energy_x_time_cap_w": cap(a.min_edp),
           "pareto_caps_w": [c.cap_w for c in a.pareto],
           "has_power": bool(a.candidates), "notes": a.notes, "fixed_work": []}
    for cell in a.candidates:
        fw = fixed_work(cell, work[a.group.unit])
        if fw is not None:
            rec["fixed_work"].append({"cap_w": cell.cap_w, "units": fw.units,
                                      "energy_j": fw.energy_j, "time_s": fw.time_s,
                                      "energy_x_time_js": fw.energy_x_time_js})
    return rec


def write_json(doc: dict, folder: Path) -> Path:
    path = folder / "report.json"
    with _replacing(folder, path.name) as fh:
        # Streamed: over 100,000 runs the text would be a second copy of every table.
        # json.dump(doc, fh, indent=2, default=str, allow_nan=False), byte for byte, faster.
        from hpcai.launcher.report import json_stream

        json_stream.dump(doc, fh)
        fh.write("\n")
    return path
