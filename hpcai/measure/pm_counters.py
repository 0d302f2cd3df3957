"""HPE Cray EX nodes' power and energy counters (/sys/cray/pm_counters) as a
node power source."""
from __future__ import annotations

import time
from pathlib import Path

from hpcai.measure.source import DEFAULT_MAX_POWER_W, Channel, PowerSource, Sample, SourceError


def _pm_value(path: Path) -> float:
    """pm_counters files read "<value> <unit> <timestamp> us" (unit W or J)."""
    text = path.read_text().split()
    if not text:
        raise SourceError(f"{path.name} is empty")
    return float(text[0])


class PmCountersSource(PowerSource):
    """/sys/cray/pm_counters: node power/energy (including accelerators),
    accel<N>_, cpu_ and memory_ power and energy; `freshness` counts up at
    about 10 Hz while the data is updated (Cray-HPE docs-csm,
    operations/power_management/User_Access_to_Compute_Node_Power_Data.md)."""
    kind = "pm_counters"
    api = "HPE Cray pm_counters sysfs"
    PREFIXES = ("", "cpu_", "memory_")  # node, CPU and memory domains

    def __init__(self, root: Path = Path("/sys/cray/pm_counters"),
                 max_power_w: float = DEFAULT_MAX_POWER_W):
        self.root = Path(root)
        self.max_power_w = max_power_w
        if not (self.root / "power").is_file():
            raise SourceError(f"{self.root}/power does not exist (not an HPE Cray EX node)")
        self.files: dict[str, tuple[str, str]] = {}  # channel -> (power file, energy file)
        for prefix in self.PREFIXES:
            if (self.root / f"{prefix}power").is_file():
                self.files[prefix.rstrip("_") or "node"] = (f"{prefix}power", f"{prefix}energy")
        for path in sorted(self.root.glob("accel*_power")):
            name = path.name[: -len("_power")]
            self.files[name] = (path.name, f"{name}_energy")
        scope_of = {"node": "node", "cpu": "cpu_package", "memory": "dram"}
        self.channels = [Channel(n, scope_of.get(n, "accelerator")) for n in self.files]
        try:
            _pm_value(self.root / "power")
        except PermissionError:
            raise SourceError(f"{self.root}/power is not readable by this user") from None
        self._first: dict[str, float] = {}
        self._freshness: tuple[float, float] | None = None
        self.stale = False

    def read(self) -> Sample:
        t = time.monotonic()
        fresh_path = self.root / "freshness"
        if fresh_path.is_file():
            fresh = _pm_value(fresh_path)
            if self._freshness is not None and fresh == self._freshness[1] \
                    and t - self._freshness[0] >= 0.5:
                self.stale = True  # freshness stands still: the values are old
                raise SourceError("freshness did not advance: the counters are not being updated")
            if self._freshness is None or fresh != self._freshness[1]:
                self._freshness = (t, fresh)
        power, energy = {}, {}
        for name, (pfile, efile) in self.files.items():
            power[name] = _pm_value(self.root / pfile)
            energy[name] = None
            if (self.root / efile).is_file():
                value = _pm_value(self.root / efile)
                self._first.setdefault(name, value)
                energy[name] = value - self._first[name]
        return Sample(t, power, energy)


