"""What CapSession (session.py), ClockSession (clocks.py) and ProfileSession
(profiles.py) share: undoing every change on every exit, with signals held off
while restoring, and the journal removed only when everything came back; the
clock and profile sessions also share one way in (SettingSession)."""
from __future__ import annotations

import logging
import signal
import time

from hpcai.errors import CapNotAppliedError, HpcaiError, Interrupted, PowerError, UsageError
from hpcai.signals import deferred_signals

log = logging.getLogger(__name__)
# Whether this process put back limits it had set (a cap or a clock): the last
# line after an interrupt says "power limits restored" only then (guarded.py).
_restored_any = False


# A set takes effect late: on an H100 80GB HBM3 (driver 580.159.04) the enforced power
# limit still read the previous cap right after the set and followed within 14-101 ms,
# and a busy GPU ran at 1980 MHz right after a clock lock. A read-back polls this long
# (20 times that) before calling a change not applied.
SETTLE_S = 2.0
SETTLE_POLL_S = 0.05


def read_back_settled(read_once) -> list[str]:
    """read_once() -> (refused, lagging), each a list of what is off. What is
    refused (a requested limit that reads otherwise) fails at once; what lags (in
    force, not yet) is read again until it settles or SETTLE_S has passed."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        refused, lagging = read_once()
        if refused or not lagging or time.monotonic() >= deadline:
            return refused + lagging
        time.sleep(SETTLE_POLL_S)


def limits_restored() -> bool:
    return _restored_any


def describe(exc: BaseException) -> str:
    if isinstance(exc, HpcaiError):
        return exc.one_line()
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class RestoringSession:
    """A subclass sets `journal_path`, `_received` (a list), `_active`, the
    labels below and `_restore_each()`: one pass over what it changed."""

    restoring_what = "settings"  # "could not restore <this>"
    setting_what = "the change"  # "<this> failed (...) and restoring failed"
    restore_hint = "run `hpcai-launch power restore`"

    def _restore_each(self) -> list[str]:
        raise NotImplementedError

    def _restore_all(self) -> list[str]:
        """Undo every change; return one message per failure."""
        while True:
            try:
                # A second Ctrl-C or SIGTERM must not cut the restore short.
                with deferred_signals() as received:
                    failures = self._restore_each()
                self._received.extend(received)
                if not failures:
                    global _restored_any
                    _restored_any = True
                return failures
            except (Interrupted, KeyboardInterrupt) as exc:
                # Arrived before the deferring handlers were in place: note it and
                # start over (restoring is idempotent).
                self._received.append(getattr(exc, "signum", signal.SIGINT))

    def _roll_back(self, exc: BaseException) -> None:
        from hpcai.launcher.power.journal import remove_journal

        failures = self._restore_all()
        if not failures:
            remove_journal(self.journal_path)
            return
        error = PowerError(f"setting {self.setting_what} failed ({describe(exc)}) and "
                           f"restoring failed: {'; '.join(failures)}", self.restore_hint)
        if isinstance(exc, Exception):
            raise error from exc
        log.error(error.one_line())  # keep KeyboardInterrupt as what propagates

    def __exit__(self, exc_type, exc, tb) -> bool:
        from hpcai.launcher.power.journal import remove_journal

        if not self._active:
            return False
        self._active = False
        failures = self._restore_all()
        if failures:
            error = PowerError(f"could not restore {self.restoring_what}: {'; '.join(failures)}",
                               self.restore_hint)
            if exc is None or isinstance(exc, Exception):
                raise error from exc
            log.error(error.one_line())
            return False
        remove_journal(self.journal_path)
        if exc is None and self._received:
            # A signal arrived while restoring: act on it now that the GPUs are safe.
            signum = self._received[0]
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Interrupted(signum)
        return False


class SettingSession(RestoringSession):
    """A clock or profile session's way in: nothing asked, nothing set (no
    journal); else refuse an earlier run's journal, check the request against
    every GPU, snapshot and journal what is there, then set and read back,
    rolled back on any failure. A subclass sets `indices`, the labels below
    and the steps: _requested, _prepare (check, snapshot, journal), _apply and
    _read_once (one read: what reads otherwise, what is not in force yet)."""

    requested_what = "a setting"  # "<this> was requested but no GPU is visible"
    no_gpu_hint = "drop the option, or run on a GPU node"
    override_hint = "the driver or a site agent overrides it; ask the site admins"

    def _requested(self) -> bool:
        raise NotImplementedError

    def _prepare(self) -> None:
        raise NotImplementedError

    def _apply(self) -> None:
        raise NotImplementedError

    def _read_once(self) -> tuple[list[str], list[str]]:
        raise NotImplementedError

    def __enter__(self):
        if not self._requested():
            return self
        if not self.indices:
            raise UsageError(f"{self.requested_what} was requested but no GPU is visible", self.no_gpu_hint)
        self._prepare()
        try:
            self._apply()
            self._read_back()
            self._active = True
        except BaseException as exc:
            self._roll_back(exc)
            raise
        return self

    def _read_back(self) -> None:
        """What was set reads back; what is in force may follow late (SETTLE_S)."""
        wrong = read_back_settled(self._read_once)
        if wrong:
            raise CapNotAppliedError(f"{self.setting_what} did not take effect: {'; '.join(wrong)}",
                                     self.override_hint)
