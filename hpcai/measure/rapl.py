"""Linux powercap (intel-rapl) energy counters, read one way for both users:
the GPU-less sampler's CPU packages (RaplDomain) and the node power source of
CPU packages and DRAM (RaplSource).
"""
from __future__ import annotations

import time
from pathlib import Path

from hpcai.gpu.base import GpuReading
from hpcai.measure.source import DEFAULT_MAX_POWER_W, Channel, PowerSource, Sample, SourceError

POWERCAP_ROOT = Path("/sys/class/powercap")
# The package counters update about once a millisecond (Intel SDM vol. 3B,
# 15.10.3): two reads closer than that are taken as that far apart when a drop
# is judged, so a wrap between back-to-back reads is not mistaken for absurd power.
COUNTER_UPDATE_S = 0.001


class RaplCounter:
    """One zone's energy_uj, unwrapped into joules since the first read.

    energy_uj counts up and wraps at max_energy_range_uj (kernel
    Documentation/power/powercap/powercap.rst); a drop is a wrap only when the
    unwrapped change is a plausible energy (at most max_power_w over the time
    between the reads), otherwise the counter ran backwards: that step counts
    0 J, no power, and `backwards` is set until the reader clears it.
    """

    def __init__(self, path: Path, max_power_w: float = DEFAULT_MAX_POWER_W):
        self.path = Path(path)
        self.range_uj = int((self.path / "max_energy_range_uj").read_text())
        self.max_power_w = max_power_w
        self.total_j = 0.0
        self.backwards = False
        self._last: tuple[float, int] | None = None

    def read(self, t: float | None = None) -> tuple[float, float | None]:
        """(joules since the first read, watts since the last read or None).
        t: the caller's monotonic time stamp of this read (now if None)."""
        uj = int((self.path / "energy_uj").read_text())
        t = time.monotonic() if t is None else t  # the interval only: immune to clock steps
        power = None
        if self._last is not None:
            t0, uj0 = self._last
            delta = uj - uj0
            if delta < 0:
                delta += self.range_uj
                if delta / 1e6 / max(t - t0, COUNTER_UPDATE_S) > self.max_power_w:
                    self.backwards = True  # not a wrap
                    self._last = (t, uj)
                    return self.total_j, None
            self.total_j += delta / 1e6
            if t > t0:
                power = delta / 1e6 / (t - t0)
        self._last = (t, uj)
        return self.total_j, power


class RaplDomain:
    """One CPU package as a sampler source (the GPU-less node's power)."""

    def __init__(self, path: Path):
        self.path = path
        self.name = (path / "name").read_text().strip()
        self._counter = RaplCounter(path)

    def read(self) -> GpuReading:
        """Cumulative energy, and power from the change since the last read. A step
        the counter ran backwards (here or in an energy_j() mark read since the last
        reading) is flagged on this reading, so the result does not trust the counter."""
        energy, power = self._counter.read()
        backwards, self._counter.backwards = self._counter.backwards, False
        return GpuReading(power_w=power, power_source="rapl", energy_j=energy,
                          counter_backwards=backwards)

    def energy_j(self) -> float:
        # Leaves the backwards flag for the next sampled reading to carry.
        return self._counter.read()[0]


def find_rapl_domains(root: Path = POWERCAP_ROOT) -> tuple[list[RaplDomain], str | None]:
    """Package-level RAPL domains readable by this user, or why there are none."""
    if not root.is_dir():
        return [], f"{root} does not exist (no Linux powercap driver on this machine)"
    domains, unreadable = [], []
    for path in sorted(root.glob("intel-rapl:*")):
        if path.name.count(":") != 1:  # sub-domains (core, uncore) are inside packages
            continue
        try:
            domain = RaplDomain(path)
            domain.read()
            domains.append(domain)
        except PermissionError:
            unreadable.append(path.name)
        except (OSError, ValueError):
            continue
    if domains:
        return domains, None
    if unreadable:
        return [], f"RAPL counters {', '.join(unreadable)} are readable only by root"
    return [], f"no RAPL package domains under {root}"


class RaplSource(PowerSource):
    """CPU packages and their DRAM domains as a node power source."""
    kind = "rapl"
    api = "Linux powercap sysfs (intel-rapl energy_uj)"

    def __init__(self, root: Path = POWERCAP_ROOT, max_power_w: float = DEFAULT_MAX_POWER_W):
        self.root = Path(root)
        self.max_power_w = max_power_w
        self.zones: dict[str, RaplCounter] = {}
        if not self.root.is_dir():
            raise SourceError(f"{self.root} does not exist (no Linux powercap driver)")
        unreadable = []
        for path in sorted(self.root.glob("intel-rapl:*")):
            try:
                name = (path / "name").read_text().strip()
                counter = RaplCounter(path, max_power_w)
                int((path / "energy_uj").read_text())
            except PermissionError:
                unreadable.append(path.name)
                continue
            except (OSError, ValueError):
                continue
            parts = path.name.split(":")
            if len(parts) == 2 and name.startswith("package"):
                self.zones[f"package-{parts[1]}"] = counter
            elif len(parts) == 3 and name == "dram":
                self.zones[f"dram-{parts[1]}"] = counter
        if not self.zones:
            if unreadable:
                raise SourceError(f"RAPL counters {', '.join(unreadable)} are readable only by root")
            raise SourceError(f"no RAPL package or DRAM domains under {self.root}")
        self.channels = [Channel(n, "dram" if n.startswith("dram") else "cpu_package")
                         for n in self.zones]

    @property
    def backwards(self) -> set[str]:
        """The channels whose counter ran backwards, not yet taken."""
        return {name for name, counter in self.zones.items() if counter.backwards}

    def take_backwards(self) -> set[str]:
        found = self.backwards
        for counter in self.zones.values():
            counter.backwards = False
        return found

    def read(self) -> Sample:
        t = time.monotonic()
        power, energy = {}, {}
        for name, counter in self.zones.items():
            energy[name], power[name] = counter.read(t)
        return Sample(t, power, energy)
