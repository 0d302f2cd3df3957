"""One word for a run without a power cap, wherever hpcai names it: "uncapped"
(the report's tables, the roofline's table, a sweep's lines, a Slurm job's script)."""
from hpcai.launcher.report import roofline
from hpcai.launcher.report.stats import cap_label
from hpcai.launcher.sweep.slots import Slot


def test_every_place_that_names_a_missing_cap_says_uncapped():
    assert cap_label(None) == "uncapped"
    assert roofline._cap(None) == "uncapped"
    assert Slot(cap_w=None, repeat=0).describe().startswith("uncapped, ")
    assert cap_label(300.0) == roofline._cap(300.0) == "300 W"
