"""The policy's settings other than a cap, set by the prolog for one job and put
back by its epilog: an SM clock lock (`sm_clock_mhz`) or a workload power profile
(`power_profile`), the two knobs `hpcai-launch plan` may choose where a cap does
not bind (launcher/planner/curves.py).

The vendor calls are hpcai/gpu/clocks.py's and hpcai/gpu/profiles.py's, the ones
`--sm-clock` and `--power-profile` use. What restoring needs (the control's
snapshot) goes into the GPU's job record, under "knob", before anything changes:
a prolog killed midway leaves a record the epilog restores from. NVML cannot read
a locked clock range back, so an NVIDIA GPU's SM clock is reset to the driver's
default (hpcai/gpu/clocks.py NvmlClocks.restore).
"""
from __future__ import annotations

from hpcai.errors import PowerError

KNOB = "knob"  # the job record's key


class _SmClockLock:
    held = "has its SM clock locked"  # what a job record of it means (job_caps.py)
    undone = "SM clock lock removed"

    def __init__(self, device):
        from hpcai.gpu.clocks import clock_control

        self.index, self.control = device.info().index, clock_control(device)

    def check(self, mhz) -> None:
        from hpcai.launcher.power.clocks import check_clocks

        check_clocks({self.index: self.control}, int(mhz), None, {"sm": "the policy's sm_clock_mhz"})

    def snapshot(self) -> dict:
        return self.control.snapshot("sm")

    def apply(self, mhz) -> None:
        self.control.set_max("sm", int(mhz))

    def restore(self, record: dict) -> None:
        self.control.restore("sm", record)


class _PowerProfile:
    held = "has a power profile requested"
    undone = "power profiles restored"

    def __init__(self, device):
        from hpcai.gpu.profiles import profile_control

        self.index, self.control = device.info().index, profile_control(device)

    def check(self, name) -> None:
        problem = self.control.problem(str(name))
        if problem:
            raise PowerError(problem, "change the policy's override, or the site's GPUs")

    def snapshot(self) -> dict:
        return self.control.snapshot()

    def apply(self, name) -> None:
        self.control.apply(str(name))
        requested, _ = self.control.in_force(str(name), self.control.current())
        if not requested:
            raise PowerError(f"GPU {self.index} does not request the power profile {name} after setting it")

    def restore(self, record: dict) -> None:
        self.control.restore(record)


_KNOBS = {"sm_clock_mhz": _SmClockLock, "power_profile": _PowerProfile}


def knob(device, kind: str):
    """The control of one of the policy's non-cap settings on a device of
    hpcai.gpu.nvidia or hpcai.gpu.amd: check(value), snapshot(), apply(value),
    restore(snapshot)."""
    return _KNOBS[kind](device)


def held_words(recorded) -> str | None:
    """What a job record's "knob" entry holds its GPU with, in words (a root run's
    refusal, launcher/power/job_caps.py); None where it holds no setting hpcai knows."""
    kind = recorded.get("kind") if isinstance(recorded, dict) else None
    return _KNOBS[kind].held if kind in _KNOBS else None


def restore(device, recorded: dict) -> str:
    """Put back what a job record's "knob" entry says; a one-line report."""
    kind = recorded.get("kind")
    if kind not in _KNOBS or not isinstance(recorded.get("restore"), dict):
        raise PowerError(f"an unknown setting in the job record: {recorded!r}",
                         "put the GPU's clocks and profiles back by hand, then delete the record")
    knob(device, kind).restore(recorded["restore"])
    return _KNOBS[kind].undone
