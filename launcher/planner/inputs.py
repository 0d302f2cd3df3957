"""The plan's inputs given at plan time: the job mix and the prices (TOML files).

Both are checked whole before anything is read or written: a bad value is one
line naming the file, the entry and what to do (ConfigError, exit 2). The mix's
format is shared with `--mix-from-sacct` and receipts (docs/how-to/choosing-gpus-and-caps.md).
The energy figures (price, PUE, carbon intensity, currency) are checked by one rule
(ENERGY, energy_figure) for a prices file and for `report --energy-price` etc.
(facility_override): they mean the same in both.
"""
from __future__ import annotations

import math
import re
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from hpcai.errors import ConfigError, UsageError

NAME = re.compile(r"^[A-Za-z0-9._-]+$")
CURRENCY = re.compile(r"^[A-Z]{3}$")  # ISO 4217, as the site file's [facility] currency
# A prices file's [energy] key -> (the report's option for it, its least value, its default)
# The site [facility] keys -> Prices' fields
FACILITY_FIELDS = {"price_per_kwh": "energy_per_kwh", "pue": "pue",
                   "carbon_g_per_kwh": "carbon_g_per_kwh", "currency": "currency"}
ENERGY = {"price_per_kwh": ("--energy-price", 0.0, 0.0), "pue": ("--pue", 1.0, 1.0),
          "carbon_g_per_kwh": ("--carbon-intensity", 0.0, 0.0)}
SHARE_TOLERANCE = 1e-6
DEFAULT_PARTITION = "default"


@dataclass(frozen=True)
class MixClass:
    name: str
    workload: str
    share: float  # of its partition's GPU-hours
    partition: str
    preset: str | None = None
    max_slowdown: float | None = None  # None: the plan's --max-slowdown
    # From receipts (--mix-from-receipts, `results jobs --as-mix`): production's measured
    # GPU-hours and GPU energy per GPU-hour, set beside the benchmark's figure.
    gpu_hours: float | None = None
    measured_wh_per_gpu_hour: float | None = None
    measured_gpu: str | None = None  # the GPU model production ran the class on


@dataclass(frozen=True)
class GpuPrice:
    """Purchase price of one GPU model: per node (with gpus_per_node) or per GPU."""

    gpu: str
    per_gpu: float
    gpus_per_node: int | None = None


@dataclass(frozen=True)
class Prices:
    energy_per_kwh: float = 0.0
    pue: float = 1.0
    carbon_g_per_kwh: float = 0.0
    lifetime_years: float = 5.0
    currency: str = ""
    gpus: dict = field(default_factory=dict)  # short name -> GpuPrice
    given: bool = False  # False: no --prices (energy and CO2 only, PUE 1)
    stated: tuple = ()  # the facility keys (ENERGY's, currency) given, not defaulted

    def gpu(self, short: str) -> GpuPrice | None:
        return self.gpus.get(short.upper())

    def overridden(self, facility: dict) -> Prices:
        """These prices with the report's facility_override (the same keys' meaning)."""
        if not facility:
            return self
        stated = tuple(dict.fromkeys((*self.stated, *facility)))
        return dataclasses.replace(self, given=True, stated=stated,
                                   **{FACILITY_FIELDS[k]: v for k, v in facility.items()})

    def facility(self) -> dict:
        """The site [facility] keys these prices state (for the report to apply)."""
        return {key: getattr(self, FACILITY_FIELDS[key]) for key in self.stated}


def read_toml(path: str | Path, what: str) -> dict:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {path} ({exc.strerror})",
                          "check the path") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} file {path} is not valid TOML ({exc})", "fix the file") from None


def number(value, where: str, *, low: float = 0.0, low_open: bool = False,
           high: float | None = None, high_open: bool = False) -> float:
    """A finite number within [low, high] (bounds open where asked); else one line."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low)
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        bounds = f"{'>' if low_open else '>='} {low:g}" + (
            f" and {'<' if high_open else '<='} {high:g}" if high is not None else "")
        raise ConfigError(f"{where} is {value!r}", f"give a finite number {bounds}")
    return float(value)


def energy_figure(key: str, value, where: str) -> float:
    """An [energy] figure (ENERGY's key) checked against its one bound."""
    return number(value, where, low=ENERGY[key][1])


def currency(value, where: str) -> str:
    if not isinstance(value, str) or not CURRENCY.match(value):
        raise ConfigError(f"{where} is {value!r}", "give a three-letter ISO 4217 code such as EUR")
    return value


def facility_override(price_per_kwh=None, pue=None, carbon_g_per_kwh=None, currency_code=None) -> dict:
    """`report --energy-price/--pue/--carbon-intensity/--currency` as the site [facility]
    keys they replace in every result, checked as a prices file's [energy] is; only those
    given (an empty dict: the results' own)."""
    given = {"price_per_kwh": price_per_kwh, "pue": pue, "carbon_g_per_kwh": carbon_g_per_kwh}
    try:
        out = {key: energy_figure(key, value, ENERGY[key][0]) for key, value in given.items()
               if value is not None}
        if currency_code is not None:
            out["currency"] = currency(currency_code, "--currency")
    except ConfigError as exc:  # an option, not a file: a usage error (exit 2)
        raise UsageError(exc.message, exc.hint) from None
    return out


def _text(value, where: str, pattern: re.Pattern | None = NAME) -> str:
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
        raise ConfigError(f"{where} is {value!r}", "give a name of letters, digits, '.', '_' or '-'")
    return value


def read_mix(path: str | Path, workloads) -> list[MixClass]:
    """The [[class]] tables of a mix file, checked: unique names, known workloads,
    shares in (0, 1] summing to 1 per partition, max_slowdown in [0, 1)."""
    doc = read_toml(path, "mix")
    unknown = sorted(set(doc) - {"class", "default_partition"})
    if unknown:
        raise ConfigError(f"mix file {path} has unknown key(s) {', '.join(unknown)}",
                          "use default_partition and [[class]] tables")
    default = _text(doc.get("default_partition", DEFAULT_PARTITION), f"mix file {path}: default_partition")
    tables = doc.get("class")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"mix file {path} has no [[class]] table", "add one per job class")
    classes = [_mix_class(t, f"mix file {path}: class {i + 1}", default, workloads)
               for i, t in enumerate(tables)]
    _check_mix(classes, path)
    return classes


def _mix_class(table, where: str, default: str, workloads) -> MixClass:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} is not a table", "write it as [[class]]")
    allowed = {"name", "workload", "preset", "share", "partition", "max_slowdown", "gpu_hours",
               "measured_wh_per_gpu_hour", "measured_gpu"}
    extra = sorted(set(table) - allowed)
    if extra or "name" not in table or "workload" not in table or "share" not in table:
        raise ConfigError(f"{where} has key(s) {', '.join(extra) or 'missing'}",
                          "a class has name, workload and share, and optionally preset, "
                          "partition, max_slowdown and (from receipts) gpu_hours, measured_wh_per_gpu_hour, measured_gpu")
    name = _text(table["name"], f"{where}: name")
    workload = table["workload"]
    if workload not in workloads:
        raise ConfigError(f"{where} ({name}): unknown workload {workload!r}",
                          f"choose one of {', '.join(sorted(workloads))} (hpcai-launch list)")
    slow = table.get("max_slowdown")
    measured = {key: number(table[key], f"{where} ({name}): {key}")
                for key in ("gpu_hours", "measured_wh_per_gpu_hour") if key in table}
    if "measured_gpu" in table:
        measured["measured_gpu"] = _text(table["measured_gpu"], f"{where} ({name}): measured_gpu")
    return MixClass(name, workload,
                    number(table["share"], f"{where} ({name}): share", low_open=True, high=1.0),
                    _text(table.get("partition", default), f"{where} ({name}): partition"),
                    _text(table["preset"], f"{where} ({name}): preset") if "preset" in table else None,
                    None if slow is None else number(slow, f"{where} ({name}): max_slowdown",
                                                     high=1.0, high_open=True), **measured)


def _check_mix(classes: list[MixClass], path) -> None:
    names = [c.name for c in classes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"mix file {path} names class(es) {', '.join(twice)} more than once",
                          "give each [[class]] its own name")
    for partition in sorted({c.partition for c in classes}):
        total = sum(c.share for c in classes if c.partition == partition)
        if abs(total - 1.0) > SHARE_TOLERANCE:
            raise ConfigError(f"mix file {path}: the shares of partition {partition!r} sum to "
                              f"{total:g}, not 1", "make each partition's class shares add up to 1")


def read_prices(path: str | Path) -> Prices:
    """The prices file: [energy] price_per_kwh, pue, carbon_g_per_kwh, currency;
    lifetime_years; [gpu.NAME] price_per_node with gpus_per_node, or price_per_gpu."""
    doc = read_toml(path, "prices")
    where = f"prices file {path}"
    extra = sorted(set(doc) - {"currency", "lifetime_years", "energy", "gpu"})
    if extra:
        raise ConfigError(f"{where} has unknown key(s) {', '.join(extra)}",
                          "use currency, lifetime_years, [energy] and [gpu.NAME]")
    energy = doc.get("energy", {})
    if not isinstance(energy, dict) or set(energy) - {"price_per_kwh", "pue", "carbon_g_per_kwh"}:
        raise ConfigError(f"{where}: [energy] takes price_per_kwh, pue and carbon_g_per_kwh",
                          "remove the other keys")
    gpus = doc.get("gpu", {})
    if not isinstance(gpus, dict):
        raise ConfigError(f"{where}: gpu is not a table", "write [gpu.H100] tables")
    figures = {key: energy_figure(key, energy.get(key, default), f"{where}: energy.{key}")
               for key, (_, _, default) in ENERGY.items()}
    return Prices(
        energy_per_kwh=figures["price_per_kwh"], pue=figures["pue"],
        carbon_g_per_kwh=figures["carbon_g_per_kwh"],
        lifetime_years=number(doc.get("lifetime_years", 5.0), f"{where}: lifetime_years", low_open=True),
        currency=currency(doc["currency"], f"{where}: currency") if "currency" in doc else "",
        gpus={name.upper(): _gpu_price(name, table, where) for name, table in gpus.items()},
        given=True, stated=tuple(key for key in FACILITY_FIELDS if key in energy or key in doc))


def _gpu_price(name: str, table, where: str) -> GpuPrice:
    where = f"{where}: gpu.{name}"
    if not isinstance(table, dict) or set(table) - {"price_per_node", "gpus_per_node", "price_per_gpu"}:
        raise ConfigError(f"{where} takes price_per_node with gpus_per_node, or price_per_gpu",
                          "remove the other keys")
    per_node = "price_per_node" in table
    if per_node == ("price_per_gpu" in table) or (per_node and "gpus_per_node" not in table):
        raise ConfigError(f"{where} needs price_per_node with gpus_per_node, or price_per_gpu (one of them)",
                          "give one purchase price")
    count = table.get("gpus_per_node")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ConfigError(f"{where}: gpus_per_node is {count!r}", "give a whole number >= 1")
    if per_node:
        return GpuPrice(name, number(table["price_per_node"], f"{where}: price_per_node") / count, count)
    return GpuPrice(name, number(table["price_per_gpu"], f"{where}: price_per_gpu"), count)
