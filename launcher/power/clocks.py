"""ClockSession: cap the SM and/or memory clock for a `with` block, always undone.

The same discipline as CapSession (session.py): check every requested clock
against every GPU's supported clocks, snapshot, write a journal (atomically,
fsynced) before the first change, set, read back; roll back on any failure;
restore on every exit (normal, exception, SIGINT, SIGTERM/SIGHUP through
hpcai.signals). The journal is a sibling of the power journal
(``<power-journal>.clocks.json``), so `hpcai-launch power restore` finds both
after a SIGKILL, and a run refuses to start while either exists.

What restoring means differs by vendor (hpcai/gpu/clocks.py): NVML cannot read
a locked range back, so NVIDIA clocks are reset to the driver's default;
amdsmi reports the range in force, so AMD gets its old maximum back.
"""
from __future__ import annotations

import logging
from pathlib import Path

from hpcai.errors import CapOutOfRangeError, HpcaiError
from hpcai.gpu.clocks import DOMAIN_NAMES, DOMAINS, clock_control
from hpcai.launcher.power.restoring import SETTLE_S, SettingSession, describe
from hpcai.launcher.power.stale import (
    load_side_journal, record_side_workload, refuse_stale_side_journal, replay_side_journal,
    vendor_controls, write_side_journal,
)

log = logging.getLogger(__name__)

KIND = "hpcai.clock-journal"
# A GPU reading up to this much above its cap still holds it (the reading and
# the cap are both whole MHz; a clock that changes mid-read rounds).
TOLERANCE_MHZ = 1.0
RESTORE_HINT = "run `hpcai-launch power restore` (as root)"
FLAGS = {"sm": "--sm-clock", "mem": "--mem-clock"}


# ---- the journal ------------------------------------------------------------------
def clock_journal_path(power_journal) -> Path:
    """The clock journal beside a power journal: power-journal-HOST.clocks.json."""
    path = Path(power_journal)
    return path.with_name(f"{path.stem}.clocks{path.suffix or '.json'}")


def write_clock_journal(path, method: str, gpus: list[dict]) -> dict:
    """gpus: [{"index", "uuid", "vendor", "domains": {"sm"|"mem": restore record}}]."""
    return write_side_journal(path, KIND, method, "clock journal", gpus)


def _check_clock_entry(gpu: dict) -> None:
    for domain, entry in gpu["domains"].items():
        if domain not in DOMAINS or entry["restore"] not in ("reset", "max_mhz"):
            raise ValueError(f"unknown entry {domain}: {entry}")


def load_clock_journal(path) -> dict | None:
    return load_side_journal(path, "clock journal", _check_clock_entry,
                             "reset the clocks by hand (nvidia-smi -rgc -rmc, or amd-smi reset --clocks), "
                             "then delete the file")


def record_clock_workload(power_journal, pgid: int, tag: str) -> None:
    record_side_workload(clock_journal_path(power_journal), load_clock_journal, pgid, tag)


def refuse_stale_clock_journal(power_journal) -> None:
    refuse_stale_side_journal(clock_journal_path(power_journal), load_clock_journal, "clock journal",
                              "its GPUs' clocks may still be capped")


# ---- checks --------------------------------------------------------------------------
def controls_for(backend, indices: list[int], restoring: bool = False) -> dict:
    """Index -> ClockControl, through the backend's vendor library. A run sets
    clocks only with the nvml/amdsmi methods; restoring takes any backend that
    holds the library (as root it works whatever the site's power method)."""
    return vendor_controls(backend, indices, restoring, "--sm-clock/--mem-clock are", clock_control)


def check_clocks(controls: dict, sm_mhz: int | None, mem_mhz: int | None, names: dict = FLAGS) -> None:
    """CapOutOfRangeError, in one line with the nearest supported values, unless
    every requested clock is one every GPU supports; names: what asked for each
    domain's clock (the run's flags, or the prolog's policy)."""
    for domain, mhz in (("mem", mem_mhz), ("sm", sm_mhz)):
        if mhz is None:
            continue
        for index, control in controls.items():
            # NVIDIA lists SM clocks per memory clock: the requested one, else the default.
            supported = control.supported(domain, mem_mhz if domain == "sm" else None)
            if supported.accepts(int(mhz)):
                continue
            near = supported.nearest(int(mhz))
            what = (f"{' or '.join(map(str, near))} MHz" if supported.values is not None
                    else f"{near[0]}-{near[-1]} MHz" if near else "none")
            raise CapOutOfRangeError(
                f"{names[domain]} {mhz} MHz is not a supported {DOMAIN_NAMES[domain]} clock of "
                f"GPU {index} ({supported.describe()})",
                f"nearest supported: {what} (`hpcai-launch power clocks` lists them)")


# ---- the session ------------------------------------------------------------------------
class ClockSession(SettingSession):
    """Context manager holding clock caps on some GPUs; see the module docstring.

    sm_mhz and mem_mhz None: nothing is set (no journal) and the record is empty.
    """

    restoring_what, setting_what, restore_hint = "clocks", "the clock cap", RESTORE_HINT
    requested_what, no_gpu_hint = "a clock cap", "drop --sm-clock/--mem-clock, or run on a GPU node"
    override_hint = "the driver or a site agent overrides clocks; ask the site admins"

    def __init__(self, backend, sm_mhz: int | None, mem_mhz: int | None,
                 gpu_indices: list[int], power_journal):
        self.backend = backend
        self.requested = {d: (None if v is None else int(v))
                          for d, v in (("sm", sm_mhz), ("mem", mem_mhz))}
        self.indices = list(dict.fromkeys(gpu_indices or []))
        self.power_journal = Path(power_journal)
        self.journal_path = clock_journal_path(power_journal)
        self.gpus: dict[int, dict] = {}
        self._controls: dict = {}
        self._snapshot: dict[int, dict[str, dict]] = {}
        # (index, domain) a set succeeded on: a failed NVML/amdsmi set changed
        # nothing, and NVML cannot tell by reading, so only these are restored.
        self._changed: set[tuple[int, str]] = set()
        self._received: list[int] = []
        self._active = False

    @property
    def domains(self) -> list[str]:
        return [d for d in DOMAINS if self.requested[d] is not None]

    def _requested(self) -> bool:
        return bool(self.domains)

    def _prepare(self) -> None:
        refuse_stale_clock_journal(self.power_journal)
        self._controls = controls_for(self.backend, self.indices)
        check_clocks(self._controls, self.requested["sm"], self.requested["mem"])
        infos = {g.index: g for g in self.backend.gpus()}
        for i, control in self._controls.items():
            self._snapshot[i] = {d: control.snapshot(d) for d in self.domains}
            self.gpus[i] = {"uuid": infos[i].uuid, "vendor": control.vendor,
                            **{d: {"requested_mhz": self.requested[d],
                                   "initial_mhz": self._snapshot[i][d].get("current_mhz"),
                                   "restore": self._snapshot[i][d]["restore"],
                                   "limit_before_mhz": self._snapshot[i][d].get("mhz"),
                                   "applied_mhz": None, "limit_mhz": None, "restored": None}
                               for d in self.domains}}
        write_clock_journal(self.journal_path, self.backend.name, [
            {"index": i, "uuid": self.gpus[i]["uuid"], "vendor": self.gpus[i]["vendor"],
             "domains": self._snapshot[i]} for i in self.indices])

    def _apply(self) -> None:
        for i, control in self._controls.items():
            # Memory first: NVIDIA's SM clocks were checked against that memory clock.
            for domain in sorted(self.domains, key=lambda d: d != "mem"):
                self._changed.add((i, domain))  # before: a signal may land just after
                try:
                    control.set_max(domain, self.requested[domain])
                except HpcaiError:
                    self._changed.discard((i, domain))  # refused: nothing changed
                    raise

    def _read_once(self) -> tuple[list[str], list[str]]:
        """One read of every GPU's clocks: (limits that read otherwise, clocks still
        above the cap)."""
        refused, lagging = [], []
        for i, control in self._controls.items():
            for domain in self.domains:
                want = self.requested[domain]
                now, limit = control.current_mhz(domain), control.limit_mhz(domain)
                entry = self.gpus[i][domain]
                entry["applied_mhz"], entry["limit_mhz"] = now, limit
                # NVML cannot read the locked range: the clock now must be under the cap.
                if limit is not None and abs(limit - want) > TOLERANCE_MHZ:
                    refused.append(f"GPU {i} reads a {DOMAIN_NAMES[domain]} clock limit of {limit:g} MHz")
                elif now is not None and now > want + TOLERANCE_MHZ:
                    lagging.append(f"GPU {i} runs its {DOMAIN_NAMES[domain]} clock at {now:g} MHz "
                                   f"after {SETTLE_S:g} s")
        return refused, lagging

    def _restore_each(self) -> list[str]:
        """Undo every clock set that succeeded; return one message per failure."""
        failures = []
        for i, domains in self._snapshot.items():
            for domain, record in domains.items():
                if (i, domain) not in self._changed:
                    continue
                try:
                    self._controls[i].restore(domain, record)
                    self.gpus[i][domain]["restored"] = True
                except Exception as exc:
                    self.gpus[i][domain]["restored"] = False
                    failures.append(f"GPU {i} {DOMAIN_NAMES[domain]} clock: {describe(exc)}")
        return failures


def restore_clocks_from_journal(backend, power_journal, force: bool = False) -> dict:
    """Put back the clocks a killed run left capped; remove the journal when all are.

    Returns {"journal", "found", "gpus": [{"index", "uuid", "domain", "restore", "ok",
    "error"}]}; PowerError (journal kept) when any could not be restored.
    """
    def steps(entry):
        for domain, snap in entry["domains"].items():
            yield ({"domain": domain, "restore": snap["restore"], "mhz": snap.get("mhz")},
                   f"{DOMAIN_NAMES[domain]} clock",
                   lambda index, d=domain, s=snap: controls_for(backend, [index], restoring=True)[index].restore(d, s))

    return replay_side_journal(backend, clock_journal_path(power_journal), load_clock_journal, "clock journal",
                               "clocks", steps, RESTORE_HINT, force)


# ---- the result --------------------------------------------------------------------------
def clocks_record(session: ClockSession | None, measured: dict[int, dict] | None = None) -> dict | None:
    """power.clocks of a result: what was requested, set, read back and restored
    per GPU, and whether the measured clock stayed under the cap (held)."""
    if session is None or not session.domains:
        return None
    measured = measured or {}
    gpus = []
    for i, gpu in sorted(session.gpus.items()):
        row = {"index": i, "uuid": gpu["uuid"]}
        for domain in session.domains:
            entry = dict(gpu[domain])
            mean = (measured.get(i) or {}).get(domain)
            entry["measured_mean_mhz"] = mean
            entry["held"] = None if mean is None else mean <= entry["requested_mhz"] + TOLERANCE_MHZ
            row[domain] = entry
        gpus.append(row)
    return {"method": session.backend.name,
            "requested_sm_mhz": session.requested["sm"],
            "requested_mem_mhz": session.requested["mem"],
            "gpus": gpus}
