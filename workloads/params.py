"""A workload's parameters as a frozen dataclass: each field is one parameter,
its default written once, its command-line option (if any) in the field's
metadata. Imports no framework: the launcher builds options and checks
presets from these classes; the implementation reads `Params.from_spec(spec)`.

The spec keeps its params as a JSON object (what the result records); a field
left out of it, or None there, takes the field's default.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from hpcai.errors import UsageError


def param(default: Any = None, *, flag: str | None = None, help: str = "", type: str = "str",
          choices: tuple = (), min: float | None = None, min_open: bool = False):
    """A parameter field; with `flag` the workload's command has an option that sets it.
    type: "str" | "int" | "float" | "flag"; choices: allowed values of that type;
    min (int, float): the smallest value allowed (excluded when min_open)."""
    option = None if flag is None else {"flag": flag, "help": help, "type": type, "choices": choices,
                                        "min": min, "min_open": min_open}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type_copy(default), metadata={"option": option})
    return field(default=default, metadata={"option": option})


def _is_of(value, hint) -> bool:
    """Whether a preset's value fits its field's annotation (None is checked by the
    caller: None always means the default). Any, and hints this does not model,
    accept every value."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_of(value, arg) for arg in typing.get_args(hint) if arg is not type(None))
    if origin is not None:  # tuple[...], dict[...]: the container's type only
        return isinstance(value, origin)
    if hint is bool:
        return isinstance(value, bool)
    if hint is float:  # JSON and TOML write 1.0 as 1
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def type_copy(value):
    return dict(value) if isinstance(value, dict) else list(value)


@dataclass(frozen=True)
class WorkloadParams:
    """Parameters every workload has: the batch (a number, "auto" or, serving,
    "unlimited"), its search start for "auto", and inputs from storage (--data)."""

    batch_size: Any = None
    batch_search_start: int | None = None
    data: str | None = None  # a folder from `hpcai-launch data make` (None: synthetic)
    data_workers: int | None = None  # loader processes per rank (None: the loader's choice)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def check(cls, values: dict, where: str) -> None:
        """A UsageError for a key that is no field of this class, or a value that
        is not of its field's type (a preset's typo fails at import, not mid-run)."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise UsageError(f"{where}: unknown parameter {', '.join(unknown)} for {cls.__name__}",
                             f"use fields of {cls.__name__}: {', '.join(cls.names())}")
        hints = typing.get_type_hints(cls)
        for name, value in values.items():
            if value is not None and not _is_of(value, hints[name]):
                raise UsageError(f"{where}: {name} = {value!r} is not {_type_name(hints[name])}",
                                 f"give {name} a value of its field's type in {cls.__name__}")

    @classmethod
    def from_dict(cls, values: dict):
        """The typed parameters of a spec's params (keys of other workloads are
        ignored; None takes the default)."""
        names = set(cls.names())
        return cls(**{k: v for k, v in values.items() if k in names and v is not None})

    @classmethod
    def from_spec(cls, spec: dict):
        return cls.from_dict(spec["params"])

    @classmethod
    def options(cls) -> list[tuple[str, dict]]:
        """(parameter, option metadata) of each field that has a command-line option."""
        return [(f.name, f.metadata["option"]) for f in dataclasses.fields(cls)
                if f.metadata.get("option")]


@dataclass(frozen=True)
class TrainParams(WorkloadParams):
    """Parameters of hpcai's PyTorch and TensorFlow training loops (torch_trainer.py)."""

    precision: str = "auto"
    channels_last: Any = None  # None: the workload's choice
    compile: bool = False
    cudnn_benchmark: bool = True
    fused_optimizer: bool = False
    optimizer: str | None = None  # "adam"; None: the workload's
    lr: float | None = None  # None: scaled from the batch
