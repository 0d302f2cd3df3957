"""Serving: prefill and decode per cap (or clock), from each result's
workload_metrics.serving_phases (hpcai/measure/serving_phases.py), so a
centre sees which phase a cap or a clock changes."""
from __future__ import annotations


from hpcai.measure.stats import mean_of_known
from hpcai.launcher.report.tables import Table, _t, fmt



def _pick(phases: list[dict], phase: str, key: str) -> float | None:
    return mean_of_known([(p.get(phase) or {}).get(key) for p in phases])


def serving_table(cells: list) -> Table | None:
    rows = []
    for cell in cells:
        phases = [r.serving_phases for r in cell.runs if r.serving_phases]
        if not phases:
            continue

        def pick(phase, key, phases=phases):
            return _pick(phases, phase, key)

        rows.append([_t(cell.group.workload_label()), _t(cell.group.device_label()),
                     _t(cell.cap_label),
                     _t(fmt(pick("prefill", "duration_s"))), _t(fmt(pick("prefill", "mean_power_w"))),
                     _t(fmt(pick("prefill", "j_per_input_token"))),
                     _t(fmt(pick("decode", "duration_s"))), _t(fmt(pick("decode", "mean_power_w"))),
                     _t(fmt(pick("decode", "j_per_output_token")))])
    if not rows:
        return None
    return Table("serving_phases", "Serving: prefill and decode",
                 ["Workload", "GPU", "Cap", "Prefill s", "Prefill W", "Prefill J per input token",
                  "Decode s", "Decode W", "Decode J per output token"], rows,
                 ["Prefill: any request waiting for its first token; decode: requests decoding "
                  "and none in prefill (from SGLang's per-request send time, time to first token "
                  "and latency). W: the run's GPUs together. Mean over the cell's runs."])
