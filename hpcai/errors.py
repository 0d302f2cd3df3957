"""One exception hierarchy for hpcai.

Every error a user can cause or fix derives from HpcaiError and carries a
one-line message plus a hint saying what to do; the CLI prints both on one
line and exits non-zero, never with a traceback.
"""
from __future__ import annotations


class HpcaiError(Exception):
    """Base of all hpcai errors the CLI reports as one line."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        if self.hint:
            text += f": {self.hint.rstrip('.')}"
        return " ".join(text.split())


class UsageError(HpcaiError):
    """Bad command-line input: unknown workload, preset, malformed value."""


class ConfigError(HpcaiError):
    """An invalid or missing site config or run spec."""


class DeviceError(HpcaiError):
    """A GPU management library failed or is missing."""


class PowerError(HpcaiError):
    """Setting, reading or restoring a power limit failed."""


class PowerPermissionError(PowerError):
    """The caller may not change power limits."""


class CapOutOfRangeError(PowerError):
    """The requested cap lies outside a GPU's min/max limits."""


class CapNotAppliedError(PowerError):
    """A cap was set but the read-back limit differs from it."""


class StaleJournalError(PowerError):
    """A journal of an earlier, unrestored run exists."""


class RuntimeNotFoundError(HpcaiError):
    """The requested container runtime or image is not available."""


class ImageError(HpcaiError):
    """An image build, pull, push, signature check or inspection failed."""


class SlurmError(HpcaiError):
    """Submitting to Slurm or asking it about a job failed."""


class WorkloadError(HpcaiError):
    """The measurement entrypoint or a workload failed."""

    exit_code = 3


class ResultError(HpcaiError):
    """A result is missing, incomplete or fails its schema."""

    exit_code = 3


class Interrupted(HpcaiError):
    """Raised in the main thread when SIGINT, SIGTERM or SIGHUP arrives."""

    exit_code = 130

    def __init__(self, signum: int):
        import signal

        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}", None)
        self.signum = signum
        self.exit_code = 128 + signum
