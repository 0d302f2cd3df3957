"""Each job class's measured settings on each GPU model, from the report's cells.

The report's cells (report/stats.py: mean per-GPU throughput of the repeats, its
95% interval, work per joule with the node overhead) and analyses
(report/efficiency.py: the caps that may be recommended, the fastest) are the
plan's only measurements; this module picks, per class and GPU model, the cells
of one workload configuration and turns them into Settings.

A Setting is one way to run the GPU: a power cap (`cap_w`), an SM-clock lock
(`sm_clock_mhz`) or a workload power profile (`power_profile`, NVML's or AMD's
determinism: --power-profile). KINDS lists them in the order the plan prefers them.
"""
from __future__ import annotations

from dataclasses import dataclass

from hpcai.launcher.report.binding import cell_binds
from hpcai.launcher.report.points import workload_key

KINDS = ("cap_w", "sm_clock_mhz", "power_profile")
# The knobs besides the cap, in words: "the SM clock lock at 1410 MHz", "the power profile max-q".
KNOB_TEXT = {"sm_clock_mhz": "the SM clock lock at {:g} MHz", "power_profile": "the power profile {}"}
# The seed paper's own assumption for its rows (hpcai/reference/seed-paper-throughput.csv's
# header: 100 W per node; seed-paper-devices.csv: 4 GPUs used per node).
PAPER_NODE_OVERHEAD_W = 100.0
PAPER_GPUS_PER_NODE = 4


@dataclass(frozen=True)
class Est:
    """A positive figure with its 95% interval [lo, hi] (lo == hi == mean: no interval)."""

    mean: float
    lo: float
    hi: float

    @classmethod
    def of(cls, mean: float, ci=None) -> Est:
        if ci is None:
            return cls(mean, mean, mean)
        return cls(mean, max(min(ci[0], mean), 1e-300), max(ci[1], mean))

    def recip(self) -> Est:
        return Est(1 / self.mean, 1 / self.hi, 1 / self.lo)

    def __mul__(self, other) -> Est:
        if isinstance(other, Est):  # both positive: the bounds multiply
            return Est(self.mean * other.mean, self.lo * other.lo, self.hi * other.hi)
        return Est(self.mean * other, self.lo * other, self.hi * other)

    __rmul__ = __mul__

    def __add__(self, other: Est) -> Est:
        return Est(self.mean + other.mean, self.lo + other.lo, self.hi + other.hi)

    def record(self) -> dict:
        return {"value": self.mean, "ci95": [self.lo, self.hi]}


ZERO = Est(0.0, 0.0, 0.0)


def total(items) -> Est:
    out = ZERO
    for item in items:
        out = out + item
    return out


def change(now: Est, base: Est) -> Est:
    """1 - now/base with its interval (now and base taken at opposite ends)."""
    def tidy(x: float) -> float:  # 1 - x/x is 0, not a rounding error's 2e-16
        return 0.0 if abs(x) < 1e-12 else x

    return Est(tidy(1 - now.mean / base.mean), tidy(1 - now.hi / base.lo), tidy(1 - now.lo / base.hi))


@dataclass(frozen=True)
class Setting:
    kind: str  # one of KINDS
    value: float | str  # W, MHz, or a profile's name
    throughput: Est  # per GPU, the workload's unit per second
    efficiency: Est  # units per joule, node overhead included (per GPU's share = per node)
    processes: int  # GPUs per measured node
    binds: bool | None = None  # report/binding.py: did the cap bind? None: unknown
    source: str = "measured"  # or "paper": the seed paper's rows (power assumed)
    gpu_power_w: float | None = None  # the GPUs' own mean power per GPU (no node overhead)

    @property
    def power_w(self) -> Est:
        """Power per GPU with its share of the node overhead: throughput / efficiency."""
        return self.throughput * self.efficiency.recip()

    @property
    def label(self) -> str:
        return setting_text(self.kind, self.value)


@dataclass
class Curve:
    """One class on one GPU model: its caps (and clock locks) that may be chosen."""

    gpu: str
    caps: list  # Settings of kind cap_w, the report's candidates
    clocks: list  # other kinds (clock locks), the knob
    fastest: Setting
    config: str  # the workload configuration ranked
    unit: str

    def at(self, cap_w: float) -> Setting | None:
        return next((s for s in self.caps if abs(s.value - cap_w) < 0.5), None)


def setting_text(kind: str, value) -> str:
    """A setting as the plan and its policy's readers see it: 450 W, SM 1410 MHz, profile max-q."""
    return {"cap_w": lambda: f"{value:g} W", "sm_clock_mhz": lambda: f"SM {value:g} MHz",
            "power_profile": lambda: f"profile {value}"}[kind]()


def setting_kind(setting: dict) -> str:
    """Which of KINDS a plan entry (an override) sets."""
    return next(kind for kind in KINDS if kind in setting)


def _setting_kind(cell) -> tuple[str, float | str]:
    group = cell.group
    if group.power_profile:
        return "power_profile", group.power_profile
    sm = group.sm_clock_cap_mhz
    return ("cap_w", cell.cap_w) if sm is None else ("sm_clock_mhz", float(sm))


def setting_of(cell) -> Setting:
    kind, value = _setting_kind(cell)
    spread = cell.repeats if cell.repeats.n >= 2 else cell.epochs
    eff = cell.efficiency
    gpu_power = cell.mean_power_w / cell.group.processes if cell.mean_power_w else None
    return Setting(kind, value, Est.of(cell.throughput, spread.ci95),
                   Est.of(eff.mean, eff.ci95 if eff.n >= 2 else None),
                   cell.group.processes, cell_binds(cell), gpu_power_w=gpu_power)


def config_key(analysis) -> str:
    """What must match to rank GPU models together: the preset (and for the paper's,
    what a run overrode of it: a batch size, the protocol; report/reference.py), the
    grid point, the GPUs and nodes of one run, and the run set."""
    from hpcai.launcher.report.reference import cell_comparability

    group = analysis.group
    parts = [f"preset {group.preset}", f"{group.processes} GPU(s)"]
    if group.nodes > 1:
        parts.append(f"{group.nodes} nodes")
    parts += [x for x in (group.point, group.series) if x]
    if group.preset == "paper":
        why = sorted({reason for c in analysis.cells for ok, reason in [cell_comparability(c)] if not ok})
        parts += [f"not as the paper ran it: {why[0]}"] if why else []
    return ", ".join(parts)


def class_curves(analyses: list, cls) -> tuple[dict, list[str]]:
    """GPU short name -> Curve for this class, and what was left out and why."""
    key = workload_key(cls.workload)
    ours = [a for a in analyses if workload_key(a.group.workload) == key
            and (cls.preset is None or a.group.preset == cls.preset)]
    capped = [a for a in ours if a.group.sm_clock_cap_mhz is None and not a.group.power_profile
              and a.candidates]
    left = [f"{cls.name}: {a.group.workload_label()} on {a.group.device}: preset "
            f"{a.group.preset!r}, the class asks for {cls.preset!r}"
            for a in analyses if workload_key(a.group.workload) == key and a not in ours]
    if not capped:
        return {}, left
    chosen = _ranked_config(capped)
    curves = {}
    for a in capped:
        config = config_key(a)
        if config != chosen:
            left.append(f"{cls.name}: {a.group.device} ({config}): another configuration than "
                        f"the one ranked ({chosen})")
            continue
        clocks = [setting_of(c) for b in ours if _same_but_knob(b.group, a.group)
                  for c in b.candidates]
        curves[a.group.device] = Curve(a.group.device, [setting_of(c) for c in a.candidates],
                                       clocks, setting_of(a.fastest), config, a.group.unit)
    return curves, left


def _ranked_config(analyses: list) -> str:
    """The configuration most GPU models measured (on a tie: the paper's preset, as it ran)."""
    models: dict[str, set] = {}
    for a in analyses:
        models.setdefault(config_key(a), set()).add(a.group.device)
    return max(sorted(models), key=lambda k: (len(models[k]), k.startswith("preset paper,"),
                                              "not as the paper ran it" not in k))


def _same_but_knob(clocked, group) -> bool:
    """A clock-locked or profiled row of the same configuration as the capped row."""
    knob = clocked.sm_clock_cap_mhz is not None or bool(clocked.power_profile)
    return (knob and clocked.workload == group.workload
            and clocked.preset == group.preset and clocked.device == group.device
            and clocked.processes == group.processes and clocked.point == group.point)


def reference_curve(refs: list, cls, gpu: str) -> Curve | None:
    """The seed paper's enforced rows for this class on gpu, power assumed at the cap
    plus the paper's node overhead (its rows carry no power): labelled source "paper"."""
    from hpcai.measure import gpu_names

    key = workload_key(cls.workload)
    points = [p for p in refs if workload_key(p.workload) == key and p.enforced
              and gpu_names.normalize(p.gpu) == gpu_names.normalize(gpu)]
    if not points or cls.preset not in (None, "paper"):
        return None
    settings = []
    for p in sorted(points, key=lambda p: p.cap_w):
        power = p.cap_w + PAPER_NODE_OVERHEAD_W / PAPER_GPUS_PER_NODE
        settings.append(Setting("cap_w", p.cap_w, Est.of(p.per_gpu), Est.of(p.per_gpu / power),
                                PAPER_GPUS_PER_NODE, None, "paper"))
    fastest = max(settings, key=lambda s: s.throughput.mean)
    return Curve(gpu, settings, [], fastest, "the seed paper's rows", points[0].unit)
