"""ProfileSession: one workload power profile requested for a `with` block, always undone.

The discipline of ClockSession (clocks.py): the profile is checked against
every GPU's offered profiles, the requested profiles snapshotted and written
to a journal (atomically, fsynced) before the first change, set, read back;
rolled back on any failure; restored on every exit (normal, exception,
SIGINT, SIGTERM/SIGHUP through hpcai.signals). The journal is a sibling of
the power journal (``<power-journal>.profiles.json``), so `hpcai-launch power
restore` finds it after a SIGKILL and a run refuses to start while it exists.
The node's GPU lock (authority.py) is held around it by the CapSession it runs
inside (hold=True), as for clocks. The vendor calls are in hpcai/gpu/profiles.py.
"""
from __future__ import annotations

from pathlib import Path

from hpcai.errors import PowerError, UsageError
from hpcai.gpu.profiles import PROFILE_IDS, profile_control
from hpcai.launcher.power.restoring import SETTLE_S, SettingSession, describe
from hpcai.launcher.power.stale import (
    load_side_journal, record_side_workload, refuse_stale_side_journal, replay_side_journal,
    vendor_controls, write_side_journal,
)

KIND = "hpcai.profile-journal"
RESTORE_HINT = "run `hpcai-launch power restore` (as root)"


# ---- the journal ------------------------------------------------------------------
def profile_journal_path(power_journal) -> Path:
    """The profile journal beside a power journal: power-journal-HOST.profiles.json."""
    path = Path(power_journal)
    return path.with_name(f"{path.stem}.profiles{path.suffix or '.json'}")


def _check_profile_entry(gpu: dict) -> None:
    snapshot = gpu["snapshot"]
    known = (all(n in PROFILE_IDS for n in snapshot["requested"]) if snapshot["restore"] == "requested"
             else snapshot["restore"] == "perf_level" and len(snapshot["requested"]) == 1)
    if not known:
        raise ValueError(f"unknown snapshot {snapshot}")


def load_profile_journal(path) -> dict | None:
    return load_side_journal(path, "power profile journal", _check_profile_entry,
                             "clear the profiles by hand (nvidia-smi power-profiles, amd-smi set "
                             "--perf-level AUTO), then delete the file")


def record_profile_workload(power_journal, pgid: int, tag: str) -> None:
    record_side_workload(profile_journal_path(power_journal), load_profile_journal, pgid, tag)


def refuse_stale_profile_journal(power_journal) -> None:
    refuse_stale_side_journal(profile_journal_path(power_journal), load_profile_journal,
                              "power profile journal", "its GPUs may still run that profile")


# ---- checks --------------------------------------------------------------------------
def profile_controls(backend, indices: list[int], restoring: bool = False) -> dict:
    """Index -> NvmlProfiles / AmdDeterminism, through the backend's vendor library
    (as clocks.controls_for)."""
    return vendor_controls(backend, indices, restoring, "--power-profile is", profile_control)


def check_profile(controls: dict, name: str) -> None:
    """UsageError, in one line, unless every GPU takes the profile; a GPU or
    driver without profiles is refused here, before anything changes."""
    for control in controls.values():
        try:
            problem = control.problem(name)
        except PowerError as exc:
            if exc.__class__ is PowerError:  # NOT_SUPPORTED / no symbol: a usage problem here
                raise UsageError(f"--power-profile {name}: {exc.message}", exc.hint) from exc
            raise
        if problem:
            raise UsageError(problem)


# ---- the session ------------------------------------------------------------------------
class ProfileSession(SettingSession):
    """Context manager holding one power profile on some GPUs; name None: nothing."""

    restoring_what, setting_what, restore_hint = "power profiles", "the power profile", RESTORE_HINT
    requested_what, no_gpu_hint = "a power profile", "drop --power-profile, or run on a GPU node"

    def __init__(self, backend, name: str | None, gpu_indices: list[int], power_journal):
        self.backend, self.name = backend, name
        self.indices = list(dict.fromkeys(gpu_indices or []))
        self.journal_path = profile_journal_path(power_journal)
        self.power_journal = Path(power_journal)
        self.gpus: dict[int, dict] = {}
        self._controls: dict = {}
        self._snapshot: dict[int, dict] = {}
        self._changed: set[int] = set()  # GPUs a request may have changed: restored
        self._received: list[int] = []
        self._active = False

    def _requested(self) -> bool:
        return self.name is not None

    def _prepare(self) -> None:
        refuse_stale_profile_journal(self.power_journal)
        self._controls = profile_controls(self.backend, self.indices)
        check_profile(self._controls, self.name)
        infos = {g.index: g for g in self.backend.gpus()}
        for i, control in self._controls.items():
            self._snapshot[i] = control.snapshot()
            self.gpus[i] = {"uuid": infos[i].uuid, "requested": self.name,
                            "before": self._snapshot[i]["requested"],
                            "read_back_requested": None, "read_back_enforced": None, "restored": None}
        write_side_journal(self.journal_path, KIND, self.backend.name, "power profile journal",
                           [{"index": i, "uuid": self.gpus[i]["uuid"], "snapshot": self._snapshot[i]}
                            for i in self.indices], profile=self.name)

    def _apply(self) -> None:
        for i, control in self._controls.items():
            self._changed.add(i)  # before: a signal may land just after
            control.apply(self.name)

    def _read_once(self) -> tuple[list[str], list[str]]:
        """One read: (GPUs whose requested profiles differ, GPUs not yet enforcing it)."""
        refused, lagging = [], []
        for i, control in self._controls.items():
            now = control.current()
            self.gpus[i]["read_back_requested"] = now["requested"]
            self.gpus[i]["read_back_enforced"] = now["enforced"]
            requested, enforced = control.in_force(self.name, now)
            if not requested:
                refused.append(f"GPU {i} requests {', '.join(now['requested']) or 'no profile'}")
            elif not enforced:
                lagging.append(f"GPU {i} enforces {', '.join(now['enforced']) or 'no profile'} "
                               f"after {SETTLE_S:g} s")
        return refused, lagging

    def _restore_each(self) -> list[str]:
        failures = []
        for i in sorted(self._changed):
            try:
                self._controls[i].restore(self._snapshot[i])
                self.gpus[i]["restored"] = True
            except Exception as exc:
                self.gpus[i]["restored"] = False
                failures.append(f"GPU {i} power profile: {describe(exc)}")
        return failures


def restore_profiles_from_journal(backend, power_journal, force: bool = False) -> dict:
    """Put back the profiles a killed run left requested; remove the journal when all are.
    Returns {"journal", "found", "gpus": [{"index", "uuid", "requested", "ok", "error"}]}."""
    def steps(entry):
        snapshot = entry["snapshot"]
        yield ({"requested": snapshot["requested"]}, "power profile",
               lambda index: profile_controls(backend, [index], restoring=True)[index].restore(snapshot))

    return replay_side_journal(backend, profile_journal_path(power_journal), load_profile_journal,
                               "power profile journal", "power profiles", steps, RESTORE_HINT, force)


# ---- the result --------------------------------------------------------------------------
def profile_record(session: ProfileSession | None) -> dict | None:
    """power.profile of a result: the profile requested, and per GPU what it
    requested before, what was read back (requested, enforced) and whether it was restored."""
    if session is None or session.name is None:
        return None
    return {"method": session.backend.name, "requested": session.name,
            "gpus": [{"index": i, **gpu} for i, gpu in sorted(session.gpus.items())]}
