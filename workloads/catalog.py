"""What workloads exist and their presets, without importing any framework.

Each workload declares itself in one module (`WORKLOAD = Workload(...)`):
hpcai's own in hpcai.workloads.registry, a centre's in its own installed package,
named by an entry point of the `hpcai.workloads` group; this module finds both.
The launcher reads the catalog to list workloads, validate names and build run
specs; the entrypoint reads it to find the module that
runs a workload.
"""
from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points

from hpcai.errors import UsageError
from hpcai.workloads import registry
from hpcai.workloads.declaration import (  # noqa: F401  (the catalog's public names)
    GENERIC_OPTIONS,
    PRESET_KINDS,
    PROTOCOL_DEFAULTS,
    UPSTREAM,
    Impl,
    Option,
    Preset,
    Workload,
)

# One Apptainer image family per definitions/<flavour>/<family>.def.
IMAGE_FAMILIES = ("cv", "llm-train", "llm-serve")
# Installed packages declare their workloads here: each entry point names a module
# holding WORKLOAD = Workload(...), or the Workload itself ("pkg.module:WORKLOAD").
ENTRY_POINT_GROUP = "hpcai.workloads"


# The plugins that could not be loaded, each a one-line error naming its distribution.
# They are left out of the catalog rather than raised at import: `hpcai-launch power
# restore` must still put limits back while a broken package is installed; the
# other commands refuse with the first one (launcher/cli/hpcai_launch.py).
PLUGIN_PROBLEMS: list[UsageError] = []
# The names of the workloads that came from installed packages: hpcai's images
# do not carry them (launcher/run/runtime.py runs them on the host by default).
PLUGINS: set[str] = set()


def discover() -> dict[str, Workload]:
    """Every registry module's WORKLOAD and every plugin's that loads, in declared
    order (then by name); the plugins that do not are in PLUGIN_PROBLEMS."""
    found = _registry_workloads()
    plugins = _plugin_workloads({w.name for w in found}, PLUGIN_PROBLEMS)
    PLUGINS.update(w.name for w in plugins)
    found += plugins
    return {w.name: w for w in sorted(found, key=lambda w: (w.order, w.name))}


def _distribution(point) -> str:
    """The installed distribution an entry point comes from, for its errors."""
    dist = getattr(point, "dist", None)
    return f"distribution {dist.name!r}" if dist is not None else f"entry point {point.value!r}"


def _plugin_workloads(names: set[str], problems: list[UsageError]) -> list[Workload]:
    """The workloads of the entry-point group; a broken or doubled one is left out
    and added to `problems` as a one-line UsageError naming its distribution."""
    plugins = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"workload plugin {point.name!r} ({_distribution(point)})"
        try:
            loaded = point.load()
            workload = getattr(loaded, "WORKLOAD", loaded)
            if not isinstance(workload, Workload):
                raise TypeError(f"{point.value} holds no WORKLOAD = Workload(...)")
            _check_family(workload)
        except Exception as exc:  # a plugin's own bug, whatever its type: one line
            reason = exc.one_line() if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
            problems.append(UsageError(f"{where} cannot be loaded: {reason}",
                                       "fix or uninstall that package"))
            continue
        if workload.name in names:
            problems.append(UsageError(f"{where} declares workload {workload.name!r}, which another "
                                       "workload already declares", "uninstall one of them"))
            continue
        names.add(workload.name)
        plugins.append(workload)
    return plugins


def _check_family(workload: Workload) -> None:
    if workload.image_family not in IMAGE_FAMILIES:
        raise TypeError(f"{workload.name}: image family {workload.image_family!r} is not one of "
                        f"{', '.join(IMAGE_FAMILIES)}")


def _registry_workloads() -> list[Workload]:
    """hpcai's own workloads: one module of hpcai.workloads.registry each."""
    found: list[Workload] = []
    for module in pkgutil.iter_modules(registry.__path__):
        if module.name.startswith("_"):
            continue
        workload = getattr(importlib.import_module(f"{registry.__name__}.{module.name}"), "WORKLOAD", None)
        if not isinstance(workload, Workload):
            raise TypeError(f"hpcai.workloads.registry.{module.name} declares no WORKLOAD = Workload(...)")
        _check_family(workload)
        found.append(workload)
    names = [w.name for w in found]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise TypeError(f"workloads declared twice in hpcai.workloads.registry: {', '.join(doubled)}")
    return found


WORKLOADS: dict[str, Workload] = discover()
# The workloads that are no benchmark (workloads/registry/exec.py): out of WORKLOADS,
# so `list`, the images, the selftest and the per-workload commands leave them alone.
COMMAND_WORKLOADS: dict[str, Workload] = {
    name: WORKLOADS.pop(name) for name in [n for n, w in WORKLOADS.items() if w.kind == "command"]}


def __getattr__(name: str):
    """The names the catalog had when it declared workloads itself: RESNET50,
    LLAMA3_8B_INFERENCE (a workload), VIT_L16_PAPER (its paper preset)."""
    base, paper = (name[:-len("_PAPER")], True) if name.endswith("_PAPER") else (name, False)
    for workload in WORKLOADS.values():
        if workload.name.upper().replace("-", "_") == base:
            return workload.presets["paper"] if paper else workload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def batch_search_start(spec: dict) -> int:
    """Where `--batch-size auto` starts: the preset's search start, else its batch."""
    workload = get_workload(spec["workload"])
    start = workload.params.from_spec(spec).batch_search_start
    if start is None:
        start = workload.params.from_dict(workload.preset(spec["preset"]).params).batch_size
    return int(start) if isinstance(start, int) or str(start).isdigit() else 8


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name] if name in WORKLOADS else COMMAND_WORKLOADS[name]
    except KeyError:
        known = ", ".join(sorted(WORKLOADS))
        raise UsageError(
            f"unknown workload {name!r}", f"choose one of: {known} (see `hpcai-launch list`)"
        ) from None


def preset_windows(workload: str, preset: str | None) -> dict:
    """The adaptive-window settings a preset declares (Preset.windows); {} for a
    preset the workload does not declare (the protocol's defaults apply)."""
    found = get_workload(workload).presets.get(preset)
    return dict(found.windows) if found is not None else {}


def family_workloads(family: str) -> list[str]:
    """The workloads an image family carries, in catalog order."""
    return [w.name for w in WORKLOADS.values() if w.image_family == family]


def params_for(spec: dict):
    """The typed parameters of a spec (its workload's params dataclass)."""
    return get_workload(spec["workload"]).params.from_spec(spec)


def check_plugins() -> None:
    """The first plugin that could not be loaded, as its one-line error."""
    if PLUGIN_PROBLEMS:
        raise PLUGIN_PROBLEMS[0]
