"""What workloads exist and their presets, without importing any framework.

The launcher reads this to list workloads, validate names and build run
specs; the entrypoint reads it to find the module that runs a workload.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.errors import UsageError

PROTOCOL_DEFAULTS = {
    "warmup_epochs": 1,  # discarded, as in the seed paper
    "epochs": 10,  # measured
    "sample_interval_s": 0.1,
}


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    params: dict  # workload parameters (batch_size, image_size, ...)
    protocol: dict  # warmup_epochs, epochs, steps_per_epoch


@dataclass(frozen=True)
class Option:
    """A workload-specific command-line option, declared here so the launcher
    can offer it without importing the workload. Its value lands in the run
    spec's params under `param` (None: keep the preset's)."""

    flag: str  # "--weights"
    param: str  # "weights"
    help: str
    type: str = "str"  # "str" | "int" | "float" | "flag"
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Impl:
    """One implementation of a workload: which module runs it and how."""

    module: str  # hpcai.workloads.<module> has build(spec, ctx)
    framework: str  # import name the host runtime must have: "torch", "tensorflow", ...
    # "torchrun": one process per GPU, launched by torchrun (DDP, FSDP).
    # "single": one process that drives every GPU itself (MirroredStrategy,
    # an inference server with tensor parallelism, an engine with its own launcher).
    process_model: str = "torchrun"


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str
    unit: str  # unit of work: "images" or "tokens"
    impls: dict[str, Impl]
    presets: dict[str, Preset] = field(default_factory=dict)
    options: tuple[Option, ...] = ()
    cpu_default_preset: str = "short"
    gpu_default_preset: str = "paper"

    @property
    def default_impl(self) -> str:
        return next(iter(self.impls))

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


RESNET50 = Workload(
    name="resnet50",
    summary="ResNet-50 training (torchvision), synthetic 224x224 images on the device, SGD",
    unit="images",
    impls={"pytorch": Impl("resnet50", "torch")},
    presets={
        "paper": Preset(
            "paper",
            "the seed paper's protocol: 224x224, batch 256 per GPU, 1 warm-up + 10 measured epochs",
            params={"batch_size": 256, "image_size": 224, "num_classes": 1000},
            protocol={"warmup_epochs": 1, "epochs": 10, "steps_per_epoch": 50},
        ),
        "short": Preset(
            "short",
            "paper input size, few steps: about a minute on a 2-core CPU",
            params={"batch_size": 8, "image_size": 224, "num_classes": 1000},
            protocol={"warmup_epochs": 1, "epochs": 3, "steps_per_epoch": 3},
        ),
        "tiny": Preset(
            "tiny",
            "64x64 images, batch 4, a few steps: seconds on CPU, for tests",
            params={"batch_size": 4, "image_size": 64, "num_classes": 100},
            protocol={"warmup_epochs": 1, "epochs": 2, "steps_per_epoch": 2},
        ),
    },
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (RESNET50,)}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        known = ", ".join(sorted(WORKLOADS))
        raise UsageError(
            f"unknown workload {name!r}", f"choose one of: {known} (see `hpcai-launch list`)"
        ) from None
