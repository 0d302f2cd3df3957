"""Ways to read and set GPU power limits, behind one interface.

nvml / amdsmi set limits through the vendor library (root needed); command
reads through the vendor library but sets through a site-provided command
(a sudo helper, say); none sets nothing. Indices are the vendor library's
(see hpcai.gpu.base.GpuInfo.index).
"""
from __future__ import annotations

import abc
import os
import shlex
import string
import subprocess

from hpcai.errors import ConfigError, DeviceError, PowerError, UsageError
from hpcai.gpu import GpuInfo, GpuLibrary, PowerLimits, open_library

METHODS = ("auto", "nvml", "amdsmi", "command", "none")
COMMAND_FIELDS = ("index", "watts", "milliwatts", "microwatts", "uuid")
COMMAND_TIMEOUT_S = 60


class PowerBackend(abc.ABC):
    name: str = ""

    @abc.abstractmethod
    def gpus(self) -> list[GpuInfo]: ...

    @abc.abstractmethod
    def limits(self, index: int) -> PowerLimits: ...

    @abc.abstractmethod
    def set_limit_w(self, index: int, watts: float) -> None: ...

    @abc.abstractmethod
    def can_set(self) -> tuple[bool, str]:
        """A best-effort guess, for `hpcai-launch info`; setting may still fail."""

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LibraryBackend(PowerBackend):
    """Reads (and by default sets) through a vendor GpuLibrary."""

    def __init__(self, library: GpuLibrary):
        self.library = library
        self._by_index = {d.info().index: d for d in library.devices()}

    def _device(self, index: int):
        try:
            return self._by_index[index]
        except KeyError:
            known = ", ".join(str(i) for i in sorted(self._by_index)) or "none"
            raise UsageError(f"no GPU with index {index}", f"visible GPU indices: {known}") from None

    def gpus(self) -> list[GpuInfo]:
        return [self._by_index[i].info() for i in sorted(self._by_index)]

    def limits(self, index: int) -> PowerLimits:
        return self._device(index).power_limits()

    def set_limit_w(self, index: int, watts: float) -> None:
        self._device(index).set_power_limit_w(watts)

    def close(self) -> None:
        self.library.close()


def _root_answer(tool: str) -> tuple[bool, str]:
    if os.geteuid() == 0:
        return True, f"running as root: {tool} can set power limits"
    return False, (
        f"not root: {tool} cannot set power limits; run as root or use "
        "--power-method command with the site's sudo helper"
    )


class NvmlBackend(LibraryBackend):
    name = "nvml"

    def can_set(self) -> tuple[bool, str]:
        return _root_answer("NVML")


class AmdSmiBackend(LibraryBackend):
    name = "amdsmi"

    def can_set(self) -> tuple[bool, str]:
        return _root_answer("amdsmi")


def check_command_template(template: str) -> list[str]:
    """Split a command template and check its {fields}; ConfigError when invalid."""
    try:
        argv = shlex.split(template)
        for token in argv:
            for _, field, _, _ in string.Formatter().parse(token):
                if field is not None and field not in COMMAND_FIELDS:
                    raise ConfigError(
                        f"unknown field {{{field}}} in power command {template!r}",
                        f"use {', '.join('{' + f + '}' for f in COMMAND_FIELDS)}",
                    )
    except ValueError as exc:
        raise ConfigError(f"malformed power command {template!r}: {exc}") from exc
    if not argv:
        raise ConfigError("the power command is empty", "set e.g. 'sudo -n nvidia-smi -i {index} -pl {watts}'")
    return argv


class CommandBackend(LibraryBackend):
    """Reads through the vendor library, sets by running the site's command."""

    name = "command"

    def __init__(self, library: GpuLibrary, template: str):
        self.argv_template = check_command_template(template)
        self.template = template
        super().__init__(library)

    def argv(self, index: int, watts: float) -> list[str]:
        # Split first, then fill each token: a value can never add arguments.
        values = {
            "index": index,
            "watts": int(round(watts)),
            "milliwatts": int(round(watts * 1e3)),
            "microwatts": int(round(watts * 1e6)),
            "uuid": self._device(index).info().uuid,
        }
        return [token.format(**values) for token in self.argv_template]

    def set_limit_w(self, index: int, watts: float) -> None:
        argv = self.argv(index, watts)
        shown = shlex.join(argv)
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except FileNotFoundError as exc:
            raise PowerError(f"power command not found: {argv[0]}", "check the site's power command") from exc
        except subprocess.TimeoutExpired as exc:
            raise PowerError(f"power command timed out after {COMMAND_TIMEOUT_S} s: {shown}") from exc
        except OSError as exc:
            raise PowerError(f"power command could not run: {shown}: {exc}") from exc
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
            last = lines[-1].strip() if lines else "no output"
            raise PowerError(
                f"power command failed with exit code {done.returncode}: {shown}: {last}",
                "check that the site's power helper may run without a password (sudo -n)",
            )

    def can_set(self) -> tuple[bool, str]:
        return True, f"site command configured: {self.template}"


class NoneBackend(LibraryBackend):
    """Reports what a library sees (if any) but never sets a limit."""

    name = "none"

    def __init__(self, library: GpuLibrary | None = None):
        self.library = library
        self._by_index = {d.info().index: d for d in library.devices()} if library is not None else {}

    def set_limit_w(self, index: int, watts: float) -> None:
        raise PowerError(
            "power method 'none' cannot set caps",
            "pick --power-method nvml|amdsmi|command",
        )

    def can_set(self) -> tuple[bool, str]:
        return False, "power method 'none' never sets caps"

    def close(self) -> None:
        if self.library is not None:
            self.library.close()


def make_backend(method: str, vendor: str | None = None, command_template: str | None = None) -> PowerBackend:
    """Build the backend a run asks for; method "auto" picks by the GPUs seen.

    vendor: "nvidia", "amd", or None/"auto" to detect.
    """
    if method not in METHODS:
        raise UsageError(f"unknown power method {method!r}", f"use one of {', '.join(METHODS)}")
    vendor = None if vendor in (None, "auto") else vendor
    if method == "nvml" and vendor not in (None, "nvidia"):
        raise UsageError("power method 'nvml' works on NVIDIA GPUs only", "use amdsmi or command for AMD GPUs")
    if method == "amdsmi" and vendor not in (None, "amd"):
        raise UsageError("power method 'amdsmi' works on AMD GPUs only", "use nvml or command for NVIDIA GPUs")
    if method == "command" and not command_template:
        raise ConfigError(
            "power method 'command' needs a command template",
            "set e.g. 'sudo -n nvidia-smi -i {index} -pl {watts}' in the site config",
        )
    if method == "command":
        check_command_template(command_template)  # fail on a bad template before touching GPUs

    if method == "none":
        try:
            return NoneBackend(open_library(vendor or "auto"))
        except DeviceError:
            return NoneBackend(None)
    if method == "nvml":
        return NvmlBackend(open_library("nvidia"))
    if method == "amdsmi":
        return AmdSmiBackend(open_library("amd"))

    library = open_library(vendor or "auto")
    if method == "command":
        if library is None:
            raise DeviceError(
                "power method 'command' reads limits through NVML or amdsmi, and neither sees a GPU",
                "install nvidia-ml-py or amdsmi, or run on a GPU node",
            )
        return CommandBackend(library, command_template)
    # auto
    if library is None:
        return NoneBackend(None)
    return NvmlBackend(library) if library.vendor == "nvidia" else AmdSmiBackend(library)
