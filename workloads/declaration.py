"""The shape of a workload's declaration: its presets, options and
implementations, and the generic options it honours. Imports no framework:
the launcher reads declarations to offer, check and plan runs.

Each workload declares itself in one module (a `WORKLOAD = Workload(...)`):
hpcai's own in hpcai.workloads.registry, a centre's in its own package, found
through the `hpcai.workloads` entry-point group; the catalog (workloads/catalog.py)
discovers both.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from hpcai.errors import UsageError
from hpcai.measure import gpu_names
from hpcai.workloads.params import WorkloadParams

PROTOCOL_DEFAULTS = {
    "warmup_epochs": 1,  # discarded, as in the seed paper
    "epochs": 10,  # measured
    "sample_interval_s": 0.1,
}


# How an implementation measures an in-run sweep (Impl.in_run): "epochs", the
# harness drives its steps (or its engine runs the harness's programs), or
# "waves", each segment is one load wave against one running server, or
# "windows", each segment is one of the program's own measured windows (exec --api).
IN_RUN_KINDS = ("epochs", "waves", "windows")
# The params fields a workload with inputs from storage needs, by data format.
DATA_SHAPE_FIELDS = {"jpeg": ("image_size", "num_classes"), "npy": ("channels", "cube")}


def module_path(name: str) -> str:
    """A full dotted module path; a bare name is one of hpcai's own workload modules."""
    return name if "." in name else f"hpcai.workloads.{name}"


# What a preset is for: `paper` reproduces the seed paper's public scripts
# (RRZE-HPC/hpc-ai-perf-bench) and is the only kind compared with its tables;
# `fast` is hpcai's best honest configuration; `test` presets are for checks.
PRESET_KINDS = {"paper": "comparable to the seed paper", "fast": "hpcai's best configuration",
                "test": "for quick checks and tests"}
UPSTREAM = "RRZE-HPC/hpc-ai-perf-bench@52d1f50"

# Windows for quick presets (Preset.windows), so an adaptive or in-run sweep on a
# CPU or on fake GPUs takes seconds: `tiny` presets (seconds) and `short` ones (a minute).
CPU_TINY_WINDOWS = {"min_window_s": 1.0, "min_window_samples": 5, "max_window_s": 8.0,
                    "block_s": 0.2, "settle_window_s": 0.5, "settle_max_s": 3.0}
CPU_SHORT_WINDOWS = {"min_window_s": 2.0, "min_window_samples": 10, "max_window_s": 15.0,
                     "block_s": 0.3, "settle_window_s": 1.0, "settle_max_s": 5.0}

# Command-line options every workload command has, by the run parameter they set.
# An implementation lists those it applies (Impl.honours); the others are refused
# when given, and dropped from a preset's parameters, so no spec records a setting
# its run ignored. (--batch-size is honoured by all: it is every workload's batch.)
GENERIC_OPTIONS = {"precision": "--precision", "channels_last": "--channels-last",
                   "compile": "--compile"}


def _names_gpu(key: str, gpu_name: str | None, memory_bytes: int | None) -> bool:
    """A device model of the table names its variant only (the paper's 94 GB H100,
    not the 80 GB one that can report the same name); another key, a model word."""
    from hpcai import devices

    found = devices.lookup(gpu_name, memory_bytes)
    if found is not None and any(d.model == key for d in devices.gpus()):
        return found.model == key
    return gpu_names.matches(key, gpu_name)


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    params: dict  # workload parameters (batch_size, image_size, ...)
    protocol: dict  # warmup_epochs, epochs, steps_per_epoch
    kind: str = "test"  # a key of PRESET_KINDS
    # Where each setting comes from: an upstream file:line, or "ours: why" where
    # the upstream does not say (or cannot be right) and hpcai chose.
    sources: dict = field(default_factory=dict)
    # Settings that differ by GPU model or vendor, as the upstream's do: a device
    # model of hpcai/devices/gpus.toml ({"H100 SXM5 94GB HBM2e": ...}) matches that
    # variant, told apart by memory; another key a word of the GPU's name
    # ({"MI300X": {"batch_size": 576}}); {"amd": {...}} its vendor.
    by_gpu: dict = field(default_factory=dict)
    gpus: int | None = None  # GPUs per run when --gpus is not given (None: all)
    # Differences from the upstream that hpcai cannot remove (another engine
    # version, a kernel library not in the images): recorded, not hidden.
    known_differences: tuple[str, ...] = ()
    # The repository@commit its sources cite, for a paper preset whose upstream is
    # not the seed paper's (None: UPSTREAM).
    upstream: str | None = None
    # Its adaptive-window and settle settings (hpcai/measure/adaptive.py's
    # WINDOW_DEFAULTS keys) where they differ from the protocol's defaults: a quick
    # preset's seconds-long windows (CPU_TINY_WINDOWS). Declared here, by the workload,
    # so the measurement core never matches a preset by its name.
    windows: dict = field(default_factory=dict)

    def __post_init__(self):
        from hpcai.measure.adaptive import check_preset_windows

        problem = check_preset_windows(self.windows)
        if problem is not None:
            raise UsageError(f"preset {self.name}: {problem}",
                             "give windows only settings of hpcai.measure.adaptive.WINDOW_DEFAULTS, "
                             "as positive numbers")

    def resolve(self, gpu_name: str | None = None, vendor: str | None = None,
                gpu_memory_bytes: int | None = None) -> dict:
        """The parameters for this GPU: the preset's, then its vendor's, then its model's."""
        params = dict(self.params)
        if vendor and vendor in self.by_gpu:
            params.update(self.by_gpu[vendor])
        for model, values in self.by_gpu.items():
            if model not in ("nvidia", "amd") and _names_gpu(model, gpu_name, gpu_memory_bytes):
                params.update(values)
        return params

    def kind_label(self) -> str:
        """What the preset is for, in words: a paper preset with its own upstream is
        comparable to that reference, not to the seed paper."""
        if self.kind == "paper" and self.upstream:
            return f"comparable to its reference, {self.upstream}"
        return PRESET_KINDS.get(self.kind, self.kind)

    def source_of(self, setting: str) -> str | None:
        return self.sources.get(setting)

    def ours(self) -> list[str]:
        """The settings whose value is hpcai's choice, not the upstream's."""
        return [k for k, v in self.sources.items() if v.startswith("ours")]


@dataclass(frozen=True)
class Option:
    """A workload-specific command-line option, declared here so the launcher
    can offer it without importing the workload. Its value lands in the run
    spec's params under `param` (None: keep the preset's)."""

    flag: str  # "--weights"
    param: str  # "weights"
    help: str
    type: str = "str"  # "str" | "int" | "float" | "flag"
    choices: tuple = ()  # allowed values, of `type`
    # For int and float: the smallest value allowed (excluded when min_open).
    min: float | None = None
    min_open: bool = False


@dataclass(frozen=True)
class Impl:
    """One implementation of a workload: which module runs it and how."""

    # The module with build(spec, ctx): a dotted path ("mycentre.mlp"), or a bare
    # name for one of hpcai's own (hpcai.workloads.<module>).
    module: str
    framework: str  # import name the host runtime must have: "torch", "tensorflow", ...
    # "torchrun": one process per GPU, launched by torchrun (DDP, FSDP).
    # "single": one process that drives every GPU itself (MirroredStrategy,
    # an inference server with tensor parallelism, an engine with its own launcher).
    process_model: str = "torchrun"
    # The generic options (keys of GENERIC_OPTIONS) this implementation applies.
    honours: tuple[str, ...] = ()
    # Import names it needs beyond its framework (checked by `info` and the images' %test).
    libraries: tuple[str, ...] = ()
    # "module:function" (module as `module` above): FLOPs per unit of work from the run's
    # parameters ({"forward_per_image", "train_per_image", "method", ...}), the same
    # count the run records; None where the engine counts them itself at run time.
    flop_model: str | None = None
    # False for hpcai's own implementation where the seed paper ran another.
    upstream: bool = True
    # How it measures in-run sweeps (a key of IN_RUN_KINDS); None: it cannot, so
    # a sweep runs one process per cap.
    in_run: str | None = None

    def __post_init__(self):
        if self.in_run is not None and self.in_run not in IN_RUN_KINDS:
            raise TypeError(f"{self.module}: in_run {self.in_run!r} is not one of {', '.join(IN_RUN_KINDS)}")

    @property
    def module_path(self) -> str:
        return module_path(self.module)

    def flops(self, params: dict) -> dict:
        """The FLOP model's count for these parameters (imports the framework)."""
        if self.flop_model is None:
            raise UsageError(f"{self.module} declares no FLOP model",
                             "its FLOPs are counted by the engine at run time")
        module, function = self.flop_model.split(":")
        return getattr(importlib.import_module(module_path(module)), function)(params)


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    unit: str  # unit of work: "images", "samples" or "tokens"
    impls: dict[str, Impl]
    presets: dict[str, Preset] = field(default_factory=dict)
    # Its parameters (workloads/params.py): every default once; fields with a flag
    # are its own command-line options.
    params: type[WorkloadParams] = WorkloadParams
    cpu_default_preset: str = "short"
    gpu_default_preset: str = "fast"
    # The Apptainer image family that carries this workload's software stack.
    image_family: str = "cv"
    order: int = 100  # where `hpcai-launch list` and the image families put it
    # Inputs from storage (--data, `hpcai-launch data make`): "jpeg" class folders,
    # "npy" shards of volumes (workloads/datasets.py); None: synthetic inputs only.
    data_format: str | None = None
    # Workload parameters `--vary NAME=...` may sweep besides gpus, batch_size, model
    # and nodes (a problem size: the image size, a cube size).
    vary_params: tuple[str, ...] = ()
    # `--vary model=...`: named sizes, each a set of params (presets are accepted too).
    model_ladder: dict = field(default_factory=dict)
    # "benchmark": listed, built into the images, checked by the selftest; "command":
    # no benchmark of its own (exec runs the user's command), reached by its own
    # command and by name (catalog.get_workload), listed nowhere else.
    kind: str = "benchmark"

    def __post_init__(self):
        """Presets and named sizes set only fields of the params class."""
        for preset in self.presets.values():
            self.params.check(preset.params, f"{self.name} preset {preset.name}")
            for gpu, values in preset.by_gpu.items():
                self.params.check(values, f"{self.name} preset {preset.name} ({gpu})")
        for size, values in self.model_ladder.items():
            if isinstance(values, dict):
                self.params.check(values, f"{self.name} model {size}")
        for name in self.vary_params:
            self.params.check({name: None}, f"{self.name} vary_params")
        # Data on disk has the shape these fields give (workloads/datasets.py: sample_shape).
        for name in DATA_SHAPE_FIELDS.get(self.data_format, ()):
            self.params.check({name: None}, f"{self.name} data_format {self.data_format}")

    @property
    def options(self) -> tuple[Option, ...]:
        """The workload's own command-line options, from its params fields."""
        return tuple(Option(meta["flag"], name, meta["help"], meta["type"], tuple(meta["choices"]),
                            meta["min"], meta["min_open"]) for name, meta in self.params.options())

    @property
    def default_impl(self) -> str:
        return next(iter(self.impls))

    @property
    def upstream_impl(self) -> str:
        """The implementation the seed paper ran (the first declared upstream one)."""
        return next((name for name, impl in self.impls.items() if impl.upstream), self.default_impl)

    def impl(self, name: str | None) -> Impl:
        name = name or self.default_impl
        try:
            return self.impls[name]
        except KeyError:
            raise UsageError(
                f"{self.name} has no implementation {name!r}",
                f"choose one of: {', '.join(self.impls)}",
            ) from None

    def preset(self, name: str) -> Preset:
        try:
            return self.presets[name]
        except KeyError:
            known = ", ".join(self.presets)
            raise UsageError(
                f"unknown preset {name!r} for {self.name}",
                f"choose one of: {known} (see `hpcai-launch list`)",
            ) from None

    def refuse_unhonoured(self, impl: str | None, overrides: dict) -> None:
        """A UsageError for the first generic option given (not None) that this
        implementation does not apply: it would be recorded but never used."""
        honours = self.impl(impl).honours
        for param, flag in GENERIC_OPTIONS.items():
            if overrides.get(param) is not None and param not in honours:
                label = self.name if len(self.impls) == 1 else f"{self.name} --impl {impl or self.default_impl}"
                applies = ", ".join(GENERIC_OPTIONS[p] for p in honours) or "none of them"
                raise UsageError(f"{label} does not honour {flag}",
                                 f"drop it (of {', '.join(GENERIC_OPTIONS.values())} it applies {applies})")

    def without_unhonoured(self, impl: str | None, params: dict) -> dict:
        """params less the generic settings this implementation does not apply."""
        honours = self.impl(impl).honours
        return {k: v for k, v in params.items() if k not in GENERIC_OPTIONS or k in honours}
