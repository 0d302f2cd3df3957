"""The run spec, typed: one JSON document that says everything needed to repeat
a run. The launcher builds it (launcher/run/spec.py), the entrypoint reads it, the
result keeps it (the schema's `$defs/spec`, held against these fields by a test).

Every part is a frozen dataclass with `to_json()` / `from_json()`. A key the
JSON lacks stays absent (UNSET), not null, so `from_json(doc).to_json() == doc`;
keys no field names are kept in `extra` and written back after the known ones.
Placing a spec (run id and folder, sweep slot, Slurm node, cap) returns a new one.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from hpcai.errors import UsageError

SPEC_VERSION = 1
_HINT = "write one with `hpcai-launch WORKLOAD --dry-run`"


class _Unset:
    """A key the JSON does not have (distinct from a key that holds null)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self):  # one instance, copied or pickled
        return (_Unset, ())


UNSET: Any = _Unset()


def freeze(value):
    """JSON made immutable: objects become read-only mappings, arrays tuples."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value):
    """freeze's inverse: plain dicts and lists, for json.dumps and the result."""
    if isinstance(value, _Part):
        return value.to_json()
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def _empty() -> Mapping:
    return types.MappingProxyType({})


class _Part:
    """to_json/from_json by the dataclass's fields; `extra` holds the other keys."""

    extra: Mapping
    # Fields holding a nested part, by name (the others are JSON values).
    PARTS: ClassVar[dict[str, type]] = {}

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "extra"]

    def to_json(self) -> dict:
        doc = {name: thaw(getattr(self, name)) for name in self.keys()
               if getattr(self, name) is not UNSET}
        doc.update(thaw(self.extra))
        return doc

    @classmethod
    def from_json(cls, doc: Mapping, where: str = ""):
        """where: the part's key in the spec, for the message naming a missing key."""
        known = cls.keys()
        for f in fields(cls):
            if f.name in known and f.name not in doc and f.default is dataclasses.MISSING:
                raise UsageError(f"key {where}{f.name} is missing", _HINT)
        values = {}
        for name in known:
            if name not in doc:
                continue
            part, value = cls.PARTS.get(name), doc[name]
            values[name] = (part.from_json(value, f"{where}{name}.")
                            if part is not None and isinstance(value, Mapping) else freeze(value))
        extra = {k: v for k, v in doc.items() if k not in known}
        return cls(**values, extra=freeze(extra))

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    # Immutable all through: a copy is the same spec.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


@dataclass(frozen=True, kw_only=True)
class Devices(_Part):
    type: str
    vendor: str = UNSET
    nproc: int = UNSET
    gpu_indices: tuple[int, ...] | None = UNSET
    # Set by the plan: the GPUs by identity (UUIDs for the sampler, ids handed over).
    gpu_uuids: tuple[str, ...] | None = UNSET
    visible_ids: tuple[Any, ...] | None = UNSET
    extra: Mapping = field(default_factory=_empty)


@dataclass(frozen=True, kw_only=True)
class Clocks(_Part):
    sm_mhz: int | None
    mem_mhz: int | None
    extra: Mapping = field(default_factory=_empty)


@dataclass(frozen=True, kw_only=True)
class Power(_Part):
    cap_w: float | None
    method: str
    cap_tolerance_frac: float = UNSET
    node_overhead_w: float
    clocks: Clocks = UNSET
    profile: str | None = UNSET  # --power-profile: an NVML workload power profile
    extra: Mapping = field(default_factory=_empty)
    PARTS: ClassVar[dict[str, type]] = {"clocks": Clocks}


@dataclass(frozen=True, kw_only=True)
class Protocol(_Part):
    """The protocol's four fixed settings; adaptive-window and preset settings
    (ci_target, block_s, settle_*, ...) are in `extra`, as resolve_protocol writes them."""

    warmup_epochs: int
    epochs: int
    steps_per_epoch: int
    sample_interval_s: float
    extra: Mapping = field(default_factory=_empty)

    def get(self, key: str, default=None):
        value = getattr(self, key, UNSET) if key in self.keys() else self.extra.get(key, UNSET)
        return default if value is UNSET else value


@dataclass(frozen=True, kw_only=True)
class Sweep(_Part):
    id: str
    key: str
    position: int
    repeat: int
    repeats: int = UNSET
    order: str = UNSET
    seed: int = UNSET
    point: tuple | None = UNSET
    in_run: bool = UNSET
    process_run_id: str = UNSET
    extra: Mapping = field(default_factory=_empty)


@dataclass(frozen=True, kw_only=True)
class Slurm(_Part):
    job_id: str
    step_id: str = UNSET
    run_index: int = UNSET
    mode: str = UNSET
    nodes: int
    node_rank: int
    rdzv_endpoint: str | None = UNSET
    rdzv_id: str | None = UNSET
    kill_wait_s: int | None = UNSET
    point: tuple | None = UNSET
    scaling: str | None = UNSET
    extra: Mapping = field(default_factory=_empty)


@dataclass(frozen=True, kw_only=True)
class InRun(_Part):
    """An in-run sweep's process: its control channel (a folder under output_dir)."""

    channel: str
    segments: int
    extra: Mapping = field(default_factory=_empty)


# What the entrypoint needs, in the order it reports the first one missing.
_NEEDED = {"run_id": str, "workload": str, "preset": str, "params": dict, "protocol": dict,
           "devices": dict, "power": dict}
_NEEDED_INSIDE = {"protocol": ("warmup_epochs", "epochs", "steps_per_epoch", "sample_interval_s"),
                  "devices": ("type",), "power": ("cap_w",)}


@dataclass(frozen=True, kw_only=True)
class RunSpec(_Part):
    """`params` stay a JSON mapping: each workload's parameters are its own."""

    spec_version: int
    run_id: str
    workload: str
    impl: str = UNSET
    preset: str
    preset_kind: str = UNSET
    params: Mapping
    # Parameters the command line set over the preset's.
    overridden: tuple[str, ...] = UNSET
    comparability: Mapping = UNSET
    protocol: Protocol
    devices: Devices
    power: Power
    site: Mapping = UNSET
    runtime: Mapping
    output_dir: str = UNSET
    seed: int = UNSET
    node_power: Mapping = UNSET  # the site's node sources the workload's sampler reads
    facility: Mapping = UNSET  # PUE, carbon and price, for the report
    sweep: Sweep = UNSET
    slurm: Slurm = UNSET
    inrun: InRun = UNSET
    extra: Mapping = field(default_factory=_empty)
    PARTS: ClassVar[dict[str, type]] = {"protocol": Protocol, "devices": Devices, "power": Power,
                                        "sweep": Sweep, "slurm": Slurm, "inrun": InRun}

    @classmethod
    def from_json(cls, doc, need_output: bool = True) -> RunSpec:
        """A UsageError naming the first thing a run spec lacks (the entrypoint's
        check: it needs these, older specs may lack the rest)."""
        if not isinstance(doc, dict):
            raise UsageError(f"it is a JSON {type(doc).__name__}, not an object", _HINT)
        needed = dict(_NEEDED, **({"output_dir": str} if need_output else {}))
        for key, kind in needed.items():
            if not isinstance(doc.get(key), kind):
                what = "missing" if key not in doc else f"not a {kind.__name__}"
                raise UsageError(f"key {key!r} is {what}", _HINT)
        for key, inner in _NEEDED_INSIDE.items():
            for name in inner:
                if name not in doc[key]:
                    raise UsageError(f"key {key}.{name} is missing", _HINT)
        values = dict(doc)
        # Older specs (and hand-written ones) may lack these: absent, not invented.
        values.setdefault("spec_version", UNSET)
        values.setdefault("runtime", UNSET)
        return super().from_json(values)

    # ---- placing: each returns a new spec --------------------------------------
    def placed(self, run_id: str | None = None, output_dir: str | None = None) -> RunSpec:
        """A run id and result folder (either kept where None)."""
        return self.replace(run_id=self.run_id if run_id is None else run_id,
                            output_dir=self.output_dir if output_dir is None else output_dir)

    def in_sweep(self, block: Sweep | Mapping) -> RunSpec:
        """One slot of a sweep: the sweep block (id, key, position, repeat, ...)."""
        return self.replace(sweep=block if isinstance(block, Sweep) else Sweep.from_json(block))

    def on_node(self, slurm: Slurm | Mapping) -> RunSpec:
        """One node's part of a Slurm job."""
        return self.replace(slurm=slurm if isinstance(slurm, Slurm) else Slurm.from_json(slurm))

    def with_cap(self, cap_w: float | None) -> RunSpec:
        return self.replace(power=self.power.replace(cap_w=cap_w))

    def with_clocks(self, clocks: Clocks | Mapping) -> RunSpec:
        """Clock caps, MHz per GPU (the launcher sets and restores them)."""
        clocks = clocks if isinstance(clocks, Clocks) else Clocks.from_json(clocks, "power.clocks.")
        return self.replace(power=self.power.replace(clocks=clocks))

    def with_profile(self, profile: str | None) -> RunSpec:
        """A workload power profile (the launcher requests and restores it)."""
        return self.replace(power=self.power.replace(profile=profile))

    def with_protocol(self, protocol: Protocol | Mapping) -> RunSpec:
        """The protocol as planned (adaptive windows filled in and checked)."""
        return self.replace(protocol=protocol if isinstance(protocol, Protocol)
                            else Protocol.from_json(protocol, "protocol."))

    def on_gpus(self, uuids, visible_ids) -> RunSpec:
        """The GPUs by identity: the sampler keeps the UUIDs, the workload is handed the ids."""
        return self.replace(devices=self.devices.replace(gpu_uuids=freeze(uuids),
                                                         visible_ids=freeze(visible_ids)))

    def at_site(self, node_power: Mapping, facility: Mapping) -> RunSpec:
        """The site's node power sources (the sampler reads them) and facility figures."""
        return self.replace(node_power=freeze(node_power), facility=freeze(facility))

    def as_process(self, protocol: Mapping, channel: str, segments: int) -> RunSpec:
        """An in-run sweep's process: its protocol resolved for segments, its channel."""
        return self.replace(protocol=Protocol.from_json(protocol),
                            inrun=InRun(channel=channel, segments=segments))

    def as_segment(self) -> RunSpec:
        """A segment of an in-run process: the process's spec without its channel."""
        return self.replace(inrun=UNSET)


def is_optional(cls: type, name: str) -> bool:
    """Whether a field's type admits null (for the schema test)."""
    hint = typing.get_type_hints(cls)[name]
    return type(None) in typing.get_args(hint)
