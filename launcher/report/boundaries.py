"""The report's "Measurement boundaries" section: per device, which
boundaries were measured (GPU board, CPU package, DRAM, accelerator, node)
and by which API, and how the node energy in efficiency was obtained
(measured at the node, or the site's fixed overhead), from each result's
power.boundaries and power.node_power."""
from __future__ import annotations

from hpcai.launcher.report.tables import Table, TCell


_NO_POWER: dict = {}


def boundaries_table(runs) -> Table | None:
    rows: dict[tuple, dict] = {}
    # Runs of one campaign share their power section (report/run_columns.py decodes
    # each text once): its boundaries are found once per section.
    found_in: dict[int, list] = {}
    for run in runs:
        if not run.usable:
            continue
        power = run.power_doc or _NO_POWER  # one object: an id never reused meanwhile
        found = found_in.get(id(power))
        if found is None:
            found = found_in[id(power)] = _found(power)
        device = f"{run.device} ×{run.processes} @ {run.site}"
        for boundary, api, figure in found:
            row = rows.setdefault((device, boundary, api, figure), {"runs": 0})
            row["runs"] += 1
    if not rows:
        return None
    header = ["Device", "Boundary", "API or basis", "Result field", "Runs"]
    body = [[TCell(d), TCell(b), TCell(a), TCell(f), TCell(str(v["runs"]), v["runs"])]
            for (d, b, a, f), v in sorted(rows.items())]
    return Table("boundaries", "Measured boundaries per device", header, body,
                 ["Each energy figure's boundary and the interface that produced it. "
                  "\"measured (source/channel)\": efficiency with node used the node's measured "
                  "energy; \"fixed overhead\": the GPUs' energy plus the site's node_overhead_w."])


def _found(power: dict) -> list[tuple[str, str, str]]:
    """(boundary, API or basis, result field) of each energy figure of a power section."""
    found = []
    for figure, b in (power.get("boundaries") or {}).items():
        if figure == "energy_j":
            found.append((b["boundary"], b["api"], "energy_j"))
    for entry in (power.get("node_power") or {}).get("sources") or []:
        if entry.get("energy_j") is not None:
            found.append((f"{entry['boundary']} ({entry['channel']})", entry["api"],
                          "node_power"))
    basis = power.get("energy_with_overhead_basis")
    if basis:
        found.append(("node, for efficiency with node", basis, "energy_with_overhead_j"))
    return found
