"""The report's "Does the cap bind?" table, from report/binding.py's verdicts."""
from __future__ import annotations

from hpcai.launcher.report.binding import CLOCK_HINT, cell_binds, summary
from hpcai.launcher.report.tables import Table, _t


def binding_table(analyses: list):
    """Per workload and GPU: caps that bound, caps that did not, what was drawn."""
    rows, hinted = [], False
    sites = len({a.group.site for a in analyses}) > 1  # as every other table: the site where several meet
    for a in analyses:
        capped = [c for c in a.cells if c.cap_w is not None and c.power_available]
        if not capped:
            continue
        flags = {id(c): cell_binds(c) for c in capped}
        bound = [c for c in capped if flags[id(c)] is True]
        loose = [c for c in capped if flags[id(c)] is False]
        unknown = [c for c in capped if flags[id(c)] is None]
        if loose:
            verdict = summary(loose)
            hinted = True
        elif bound:
            verdict = "every cap measured bound"
        else:
            verdict = "not known (no throttle reasons or limits read)"
        rows.append([_t(a.group.workload_label()), _t(a.group.device_label(sites)),
                     _t(", ".join(c.cap_label for c in bound) or "–"),
                     _t(", ".join(c.cap_label for c in loose) or "–"),
                     _t(", ".join(c.cap_label for c in unknown) or "–"),
                     _t(verdict)])
    if not rows:
        return None
    notes = ["A cap binds when, in at least 10% of the measured window's samples, the GPU reported "
             "the power-cap throttle reason (NVML SwPowerCap, amdsmi PPT) or drew at least 95% "
             "of the limit (result power.cap_binding). Caps that did not bind are never "
             "recommended as saving energy."]
    if hinted:
        notes.append("Where caps did not bind: " + CLOCK_HINT + ".")
    return Table("cap_binding", "Does the cap bind?",
                 ["Workload", "GPU", "Bound", "Did not bind", "Not known", "Where caps stopped binding"],
                 rows, notes)
