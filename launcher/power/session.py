"""CapSession: set a power cap for the length of a `with` block, and always undo it.

Order of operations on entry: check the cap against every GPU's range,
snapshot the current limits, write the journal, set, read back. Any failure
on the way rolls back what changed. On exit (normal, exception, Ctrl-C,
SIGTERM/SIGHUP via hpcai.signals) every GPU goes back to its snapshot;
the journal is removed only when all of them did, so a crash or a failed
restore leaves a record for `hpcai-launch power restore`.
"""
from __future__ import annotations

import logging
import math
import socket
import time
from pathlib import Path

from hpcai.errors import (
    CapNotAppliedError,
    CapOutOfRangeError,
    ConfigError,
    HpcaiError,
    PowerError,
    StaleJournalError,
    UsageError,
)
from hpcai.gpu.base import LIMIT_MATCH_W
from hpcai.launcher.power.backends import PowerBackend
from hpcai.launcher.power.restoring import SETTLE_S, RestoringSession, describe, read_back_settled
from hpcai.launcher.power.stale import pid_alive, stop_or_refuse
from hpcai.launcher.power.journal import default_journal_path, load_journal, remove_journal, write_journal
from hpcai.signals import install_signal_handlers

log = logging.getLogger(__name__)

JOURNAL_POLL_S = 0.2
RESTORE_HINT = "run `hpcai-launch power restore` (as root, or with the site's power command)"

__all__ = ["CapSession", "check_cap_range", "install_signal_handlers", "restore_from_journal"]


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def refuse_stale_journal(path) -> None:
    """StaleJournalError while a journal exists: its GPUs may still be capped
    (or their clocks: the clock journal beside it, launcher/power/clocks.py)."""
    from hpcai.launcher.power.clocks import refuse_stale_clock_journal
    from hpcai.launcher.power.profiles import refuse_stale_profile_journal

    refuse_stale_clock_journal(path)
    refuse_stale_profile_journal(path)
    path = Path(path)
    if not path.exists():
        return
    try:
        record = load_journal(path) or {}
    except ConfigError:
        record = {}
    pid = record.get("pid", "unknown")
    running = ", still running" if pid_alive(record.get("pid")) else ""
    raise StaleJournalError(
        f"a power journal from an earlier run exists at {path} (pid {pid}{running}): "
        "its GPUs may still be capped",
        "run `hpcai-launch power restore` first",
    )


def check_cap_range(cap_w: float, limits: dict) -> None:
    """CapOutOfRangeError unless cap_w lies in every GPU's [min, max] (limits: index -> PowerLimits)."""
    lows = [lim.min_w for lim in limits.values() if lim.min_w is not None]
    highs = [lim.max_w for lim in limits.values() if lim.max_w is not None]
    lo, hi = (max(lows) if lows else None), (min(highs) if highs else None)
    for i, lim in limits.items():
        if (lim.min_w is not None and cap_w < lim.min_w) or (
            lim.max_w is not None and cap_w > lim.max_w
        ):
            raise CapOutOfRangeError(
                f"cap {cap_w:g} W is outside GPU {i}'s range {_fmt(lim.min_w)}-{_fmt(lim.max_w)} W",
                f"pick a cap between {_fmt(lo)} and {_fmt(hi)} W",
            )


class CapSession(RestoringSession):
    """Context manager holding a power cap on some GPUs; see the module docstring.

    cap_w None: only record the limits in force (no journal, nothing set).
    """

    restoring_what, setting_what, restore_hint = "power limits", "the cap", RESTORE_HINT

    def __init__(
        self,
        backend: PowerBackend,
        cap_w: float | None,
        gpu_indices: list[int] | None = None,
        journal_path=None,
        run_id: str | None = None,
        hold: bool = False,
        wait_s: float = 0.0,
        on_wait=None,
    ):
        self.backend = backend
        self.cap_w = None if cap_w is None else float(cap_w)
        self.gpu_indices = None if gpu_indices is None else list(dict.fromkeys(gpu_indices))
        self.journal_path = Path(journal_path) if journal_path is not None else default_journal_path()
        self.indices: list[int] = []
        self.gpus: dict[int, dict] = {}  # per GPU index, for the result record
        self._snapshot: dict[int, float] = {}
        self._received: list[int] = []  # signals deferred while restoring
        self._active = False
        # The node's lock on these GPUs (authority.py): taken before any change,
        # for a cap or (hold) for the clocks a ClockSession sets inside this one.
        self.run_id, self.hold, self.wait_s = run_id, hold, float(wait_s)
        self.authority = None
        self.on_wait = on_wait  # on_wait(message): a run queued behind a holder says so
        self._asked: dict[int, list[float]] = {}  # every limit this run set, per GPU
        self._queued: float | None = None  # when this run began to wait for a live run's journal

    # -- entry --------------------------------------------------------------------
    def __enter__(self) -> CapSession:
        limits = self._read_gpus()
        # Uncapped too: GPUs a killed run left capped would make its label wrong.
        # With --wait-for-gpus, a live run's journal is not stale: queue behind it.
        self._queued = time.monotonic() if self._journal_of_live_run() else None
        if self._queued is None:
            self._refuse_stale_journal()
        if self.cap_w is None:
            if self.hold and self.indices:
                self._take_authority()
                self._await_journal()
            else:
                self._note_holders()
            return self
        if not self.indices:
            raise UsageError("a power cap was requested but no GPU is visible")
        if not math.isfinite(self.cap_w) or self.cap_w <= 0:
            raise UsageError(f"invalid power cap {self.cap_w:g} W", "give a positive number of watts")
        self._check_range(limits)

        self._take_authority()  # before anything changes: a held GPU is refused here
        try:
            self._await_journal()
            # Read again under the lock: a run we waited for may have changed them since.
            limits = {i: self.backend.limits(i) for i in self.indices}
            for i in self.indices:
                self.gpus[i].update(initial_w=limits[i].current_w, applied_w=limits[i].current_w,
                                    enforced_w=limits[i].enforced_w)
            self._snapshot = {i: self._original_w(i, limits[i].current_w) for i in self.indices}
            write_journal(
                self.journal_path,
                self.backend.name,
                {i: {"uuid": self.gpus[i]["uuid"], "limit_w": w} for i, w in self._snapshot.items()},
            )
        except BaseException:
            self._release_authority()
            raise
        try:
            for i in self.indices:
                self._set(i, self.cap_w)
            self._read_back()
            self._active = True
        except BaseException as exc:
            try:
                self._roll_back(exc)
            finally:
                self._release_authority()
            raise
        return self

    def _read_gpus(self) -> dict:
        """The GPUs asked for (every visible one by default), each one's record
        started from its limits now; those limits, per index."""
        infos = {g.index: g for g in self.backend.gpus()}
        indices = sorted(infos) if self.gpu_indices is None else self.gpu_indices
        unknown = [i for i in indices if i not in infos]
        if unknown:
            known = ", ".join(map(str, sorted(infos))) or "none"
            raise UsageError(f"no GPU with index {unknown[0]}", f"visible GPU indices: {known}")
        self.indices = list(indices)
        limits = {i: self.backend.limits(i) for i in self.indices}
        for i in self.indices:
            lim = limits[i]
            self.gpus[i] = {
                "uuid": infos[i].uuid, "name": infos[i].name, "default_w": lim.default_w,
                "min_w": lim.min_w, "max_w": lim.max_w, "initial_w": lim.current_w,
                "requested_w": self.cap_w, "applied_w": lim.current_w, "enforced_w": lim.enforced_w,
                "restored_w": None, "held_by": None, "changed_during_run_w": None,
            }
        return limits

    # -- the node's authority (authority.py) -------------------------------------------
    def _take_authority(self) -> None:
        from hpcai.launcher.power.authority import GpuAuthority, authority_applies
        from hpcai.launcher.power.job_caps import refuse_running_job_caps

        if not authority_applies(self.backend):
            return  # not root, setting through the site's helper: the helper takes it
        uuids = [self.gpus[i]["uuid"] for i in self.indices]
        self.authority = GpuAuthority(uuids, self.run_id, self.wait_s, on_wait=self._waiting).__enter__()
        try:  # under the lock: the helper's one-shot caps hold no lock of their own
            refuse_running_job_caps(self.authority.uuids, self.authority.root)
        except BaseException:
            self._release_authority()
            raise

    def _journal_of_live_run(self) -> bool:
        """A journal at our path whose run still lives (not this process), while this
        run may wait (--wait-for-gpus) and will hold the GPUs' lock."""
        if self.wait_s <= 0 or (self.cap_w is None and not self.hold) or not self.journal_path.exists():
            return False
        try:
            record = load_journal(self.journal_path) or {}
        except (ConfigError, PowerError):
            return False
        return pid_alive(record.get("pid"))

    def _await_journal(self) -> None:
        """Queued behind a live run of ours: wait (holding our GPUs' lock) until it has
        removed its journal; then the usual check (a dead run's journal is refused)."""
        if self._queued is None:
            return
        deadline = self._queued + self.wait_s
        told = False
        while self._journal_of_live_run() and time.monotonic() < deadline:
            if not told:
                told = True
                (self.on_wait or log.warning)(f"the run that wrote {self.journal_path} is still running: "
                                              f"waiting up to {self.wait_s:g} s for it")
            time.sleep(JOURNAL_POLL_S)
        if self._journal_of_live_run():
            raise StaleJournalError(f"the run that wrote {self.journal_path} is still running after "
                                    f"waiting {self.wait_s:g} s", "wait for it to end, or pass a longer --wait-for-gpus")
        self._refuse_stale_journal()

    def _waiting(self, uuid: str, holder: str) -> None:
        message = f"GPU {uuid} is held by another run ({holder}): waiting up to {self.wait_s:g} s for it"
        (self.on_wait or log.warning)(message)

    def _release_authority(self) -> None:
        if self.authority is not None:
            self.authority.__exit__(None, None, None)
            self.authority = None

    def _original_w(self, index: int, current_w: float) -> float:
        if self.authority is None:
            return current_w
        return self.authority.original_w(self.gpus[index]["uuid"], current_w)

    def _note_holders(self) -> None:
        """Uncapped: who holds these GPUs now, for the validity check's note."""
        from hpcai.launcher.power.authority import describe_holder, holder_of

        for gpu in self.gpus.values():
            try:
                holder = holder_of(gpu["uuid"]) if gpu.get("uuid") else None
            except Exception:  # noqa: BLE001 - a note, never a reason to stop
                holder = None
            if holder is not None:
                gpu["held_by"] = describe_holder(holder)

    def _set(self, index: int, watts: float) -> None:
        self._asked.setdefault(index, []).append(watts)  # before: it may half-happen
        self.backend.set_limit_w(index, watts)

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            return super().__exit__(exc_type, exc, tb)
        finally:
            self._release_authority()

    def _refuse_stale_journal(self) -> None:
        refuse_stale_journal(self.journal_path)

    def _check_range(self, limits) -> None:
        check_cap_range(self.cap_w, {i: limits[i] for i in self.indices})

    def _read_back(self) -> None:
        """Each GPU's requested and enforced limit equal the cap; the enforced one
        may follow late (restoring.SETTLE_S)."""
        wrong = read_back_settled(self._off_cap)
        if wrong:
            raise CapNotAppliedError(
                f"the cap of {self.cap_w:g} W did not take effect: {'; '.join(wrong)}",
                "the driver or a site agent overrides power limits; ask the site admins",
            )

    def _off_cap(self) -> tuple[list[str], list[str]]:
        """One read of every GPU's limits: (requested limits off the cap, enforced
        limits off the cap)."""
        refused, lagging = [], []
        for i in self.indices:
            lim = self.backend.limits(i)
            self.gpus[i]["applied_w"] = lim.current_w
            self.gpus[i]["enforced_w"] = lim.enforced_w
            if abs(lim.current_w - self.cap_w) > LIMIT_MATCH_W:
                refused.append(f"GPU {i} reads {lim.current_w:g} W")
            # What the GPU holds to: a BMC or site limiter may enforce less than was set.
            elif lim.enforced_w is not None and abs(lim.enforced_w - self.cap_w) > LIMIT_MATCH_W:
                lagging.append(f"GPU {i} enforces {lim.enforced_w:g} W after {SETTLE_S:g} s")
        return refused, lagging

    # -- restore --------------------------------------------------------------------
    def _restore_each(self) -> list[str]:
        """Put every GPU back to its snapshot; return one message per failure."""
        failures = []
        for i, want in self._snapshot.items():
            try:
                self.gpus[i]["restored_w"] = self._restore_one(i, want)
                if self.authority is not None:
                    self.authority.forget_original(self.gpus[i]["uuid"])
            except Exception as exc:
                failures.append(f"GPU {i}: {describe(exc)}")
        return failures

    def _restore_one(self, index: int, want: float) -> float | None:
        try:
            current = self.backend.limits(index).current_w
            if abs(current - want) <= LIMIT_MATCH_W:
                return current  # never changed (or the set was ignored)
            if not any(abs(current - w) <= LIMIT_MATCH_W for w in self._asked.get(index, [])):
                # Not a limit this run set: someone changed it during the run. Theirs
                # stays; the result says so (restore only what this run set).
                self.gpus[index]["changed_during_run_w"] = current
                log.warning("GPU %s: its limit was changed to %g W during the run by someone "
                            "else; left as it is (not restored to %g W)", index, current, want)
                return None
        except HpcaiError:
            pass  # cannot read: try setting anyway
        self.backend.set_limit_w(index, want)
        got = self.backend.limits(index).current_w
        if abs(got - want) > LIMIT_MATCH_W:
            raise PowerError(f"reads {got:g} W after restoring {want:g} W")
        return got

    def change_cap(self, cap_w: float) -> None:
        """In-run sweeps: hold another cap inside the same session. The snapshot
        and the journal stay the session's first, so every exit (a signal
        mid-sweep, a crash, `power restore` after SIGKILL) restores the limits
        from before the sweep, never the previous segment's cap. A cap that does
        not take effect raises CapNotAppliedError; the session's exit restores."""
        if not self._active:
            raise PowerError("no cap session is active", "this is a bug in hpcai")
        cap_w = float(cap_w)
        self._check_range_of(cap_w)
        self.cap_w = cap_w
        for i in self.indices:
            self._set(i, cap_w)
            self.gpus[i]["requested_w"] = cap_w
        self._read_back()

    def mark_segment(self, index: int, cap_w: float) -> None:
        """An in-run sweep's segment `index` runs under cap_w: the node's holder records
        say so (the metrics exporter reads them). Not root: the site's helper holds the
        lock only while it sets, so there is no record to mark. A failed write is a
        warning: monitoring never stops a measurement."""
        if self.authority is None:
            return
        try:
            self.authority.mark_segment(index, cap_w)
        except (OSError, HpcaiError) as exc:
            log.warning("could not name segment %s in the node's holder records: %s", index, describe(exc))

    def _check_range_of(self, cap_w: float) -> None:
        check_cap_range(cap_w, {i: self.backend.limits(i) for i in self.indices})

    def to_dict(self) -> dict:
        """What the result record needs: method, cap, and per-GPU limits."""
        return {
            "method": self.backend.name,
            "cap_w": self.cap_w,
            "gpus": {str(i): dict(g, index=i) for i, g in self.gpus.items()},
        }


def original_of_held(authority, uuid: str) -> dict | None:
    from hpcai.launcher.power.authority import original_of

    return original_of(uuid, authority.root)


def restore_from_journal(backend: PowerBackend, journal_path=None, force: bool = False) -> dict:
    """Restore the limits a dead run left in its journal; remove it when all are back.

    Returns {"journal", "found", "message", "gpus": [...]}. No journal is not an
    error. Raises PowerError (journal kept) when any GPU could not be restored.
    """
    path = Path(journal_path) if journal_path is not None else default_journal_path()
    record = load_journal(path)
    if record is None:
        return {"journal": str(path), "found": False, "message": f"no power journal at {path}: nothing to restore", "gpus": []}
    host = socket.gethostname()
    if record.get("hostname") not in (None, host):
        raise PowerError(
            f"the power journal {path} was written on {record['hostname']}, not on this host ({host})",
            "run `hpcai-launch power restore` on that node",
        )
    if not force and pid_alive(record.get("pid")):
        raise PowerError(
            f"the run that wrote {path} (pid {record['pid']}) is still running",
            "stop it first (it restores the limits when it exits), or pass --force",
        )
    by_uuid = {g.uuid: g.index for g in backend.gpus()}
    # Before anything is stopped or set: the journal's GPUs must be this node's,
    # its limits within their range, and no live run may hold them.
    check_journal_gpus(backend, record, by_uuid, path)
    authority = restore_authority(backend, [e.get("uuid") for e in record["gpus"]])
    try:
        stop_or_refuse(record.get("workload"), path, force)
        return _restore_entries(backend, record, by_uuid, path, authority)
    finally:
        if authority is not None:
            authority.__exit__(None, None, None)


def check_journal_gpus(backend, record: dict, by_uuid: dict, path) -> None:
    """PowerError unless every GPU the journal names is here, by UUID, and its
    limit lies in that GPU's range: a planted journal sets nothing."""
    for entry in record["gpus"]:
        uuid = entry.get("uuid")
        index = by_uuid.get(uuid) if uuid else int(entry["index"])  # no UUID: an old journal
        if index is None and unreachable_gpus(backend):
            continue  # perhaps that lost one: the others are restored, its entry kept
        if index is None or index not in by_uuid.values():
            raise PowerError(f"the power journal {path} names GPU {uuid or index!r}, which this node does not have",
                             "it does not belong to this node; check it and delete it")
        lim = backend.limits(index)
        want = float(entry["limit_w"])
        if not math.isfinite(want) or (lim.min_w is not None and want < lim.min_w - LIMIT_MATCH_W) or (
                lim.max_w is not None and want > lim.max_w + LIMIT_MATCH_W):
            raise PowerError(f"the power journal {path} asks for {want:g} W on GPU {uuid}, outside its range "
                             f"{_fmt(lim.min_w)}-{_fmt(lim.max_w)} W", "check it and delete it")


def unreachable_gpus(backend) -> str:
    """The node's GPUs its library counts but cannot open (lost, or another job's),
    in a few words; "" when there are none."""
    skipped = getattr(getattr(backend, "library", None), "inaccessible", None) or []
    return "; ".join(f"GPU {g.get('index')}: {g.get('reason')}" for g in skipped)


LOST_HINT = ("keep the journal: it still names the limit to put back; run `hpcai-launch power restore` "
             "again once the GPU is back (after a reset or a reboot, when it holds its default again)")


def restore_authority(backend, uuids: list):
    """As root, the node's lock on these GPUs for the restore: a GPU a live run
    holds is refused (that run restores its own). None without root."""
    from hpcai.launcher.power.authority import GpuAuthority, authority_applies
    from hpcai.launcher.power.job_caps import refuse_running_job_caps

    if not authority_applies(backend):
        return None
    authority = GpuAuthority([u for u in uuids if u], "power-restore").__enter__()
    try:  # a running job's helper cap is that job's to restore (its epilog)
        refuse_running_job_caps(authority.uuids, authority.root)
    except BaseException:
        authority.__exit__(None, None, None)
        raise
    return authority


def restore_originals(backend) -> list[dict]:
    """As root: the limits recorded node-wide (authority.py) by a holder that died
    without restoring them, journal or not (a deleted journal). One dict per GPU."""
    from hpcai.launcher.power.authority import LOCK_ROOT, authority_applies, holder_of, original_of
    from hpcai.launcher.power.job_caps import GpuCappedForJobError

    if not authority_applies(backend) or not LOCK_ROOT.is_dir():
        return []
    done = []
    for gpu in backend.gpus():
        record = original_of(gpu.uuid) if gpu.uuid else None
        if not record or holder_of(gpu.uuid) is not None:
            continue
        want = float(record["limit_w"])
        lim = backend.limits(gpu.index)
        if lim.min_w is not None and lim.max_w is not None and not lim.min_w - LIMIT_MATCH_W <= want <= lim.max_w + LIMIT_MATCH_W:
            continue
        try:
            authority = restore_authority(backend, [gpu.uuid])
        except GpuCappedForJobError as exc:
            log.warning("%s (its limit is left as it is)", exc.one_line())
            continue
        try:
            backend.set_limit_w(gpu.index, want)
            got = backend.limits(gpu.index).current_w
            if abs(got - want) > LIMIT_MATCH_W:
                raise PowerError(f"GPU {gpu.index} reads {got:g} W after restoring {want:g} W", RESTORE_HINT)
            authority.forget_original(gpu.uuid)
        finally:
            authority.__exit__(None, None, None)
        done.append({"index": gpu.index, "uuid": gpu.uuid, "limit_w": want, "read_back_w": got})
    return done


def _restore_entries(backend, record: dict, by_uuid: dict, path, authority) -> dict:
    results, failures = [], []
    for entry in record["gpus"]:
        uuid, want = entry.get("uuid"), float(entry["limit_w"])
        index = by_uuid.get(uuid) if uuid else int(entry["index"])
        result = {"index": index, "uuid": uuid, "limit_w": want, "read_back_w": None, "ok": False, "error": None}
        results.append(result)
        try:
            if index is None:
                raise PowerError(f"it is unreachable ({unreachable_gpus(backend)}) and may still be capped")
            if authority is not None and uuid:  # the node-wide record knows the first holder's limit
                want = float((original_of_held(authority, uuid) or {}).get("limit_w", want))
                result["limit_w"] = want
            backend.set_limit_w(index, want)
            got = backend.limits(index).current_w
            result["read_back_w"] = got
            if abs(got - want) > LIMIT_MATCH_W:
                raise PowerError(f"reads {got:g} W after restoring {want:g} W")
            result["ok"] = True
            if authority is not None and uuid:
                authority.forget_original(uuid)
        except HpcaiError as exc:
            result["error"] = exc.one_line()
            failures.append(f"GPU {entry['index']} ({uuid}): {exc.one_line()}")
    summary = {"journal": str(path), "found": True, "gpus": results}
    if failures:
        hint = LOST_HINT if any(r["index"] is None for r in results) else RESTORE_HINT
        error = PowerError(f"could not restore power limits from {path}: {'; '.join(failures)}", hint)
        error.result = dict(summary, message=error.message)
        raise error
    remove_journal(path)
    summary["message"] = f"restored {len(results)} GPU(s) from {path}"
    return summary
