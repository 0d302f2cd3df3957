"""What a dead run may have left behind: its launcher's pid, its workload's
processes. Shared by the cap, clock and profile sessions (session.py,
clocks.py, profiles.py), which each keep a journal of their own."""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

from hpcai.errors import ConfigError, PowerError

log = logging.getLogger(__name__)


def pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:  # a killed launcher nobody reaped yet is a zombie: it holds nothing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


SIDE_JOURNAL_FORMAT = 1


def write_side_journal(path: Path, kind: str, method: str, what: str, gpus: list[dict], **fields) -> dict:
    """A clock or profile journal (`what`), written before the first change: who
    wrote it and when, the power method, `fields`, and per GPU what to put back."""
    from hpcai.launcher.power.journal import write_new_record

    record = {"format": SIDE_JOURNAL_FORMAT, "kind": kind, "hostname": socket.gethostname(),
              "pid": os.getpid(), "method": method,
              "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "created_unix": time.time(),
              **fields, "gpus": gpus}
    write_new_record(path, record, what)
    return record


def load_side_journal(path: Path, what: str, check_gpu, hint: str) -> dict | None:
    """A clock or profile journal (`what`); None when there is none. Every GPU entry
    has an index and passes check_gpu (which raises ValueError, KeyError...); else
    ConfigError with `hint`, the way to undo it by hand."""
    from hpcai.launcher.power.journal import read_record_text

    text = read_record_text(Path(path), what)
    if text is None:
        return None
    try:
        record = json.loads(text)
        for gpu in record["gpus"]:
            int(gpu["index"])
            check_gpu(gpu)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"the {what} {path} is unreadable ({exc})", hint) from exc
    return record


def record_side_workload(path: Path, load, pgid: int, tag: str) -> None:
    """As journal.record_workload, for the clock or profile journal at path (read by
    load): `power restore` must not change a setting under a workload that still runs."""
    from hpcai.launcher.power.journal import _write_record

    record = load(path)
    if record is None:
        return
    record["workload"] = {"pgid": int(pgid), "tag": tag}
    _write_record(Path(path), record)


def refuse_stale_side_journal(path: Path, load, what: str, risk: str) -> None:
    """StaleJournalError where an earlier run's clock or profile journal (`what`) is
    left: its GPUs may still hold that setting (`risk`)."""
    from hpcai.errors import StaleJournalError

    if not os.path.lexists(path):
        return
    try:
        record = load(path) or {}
    except (ConfigError, PowerError):
        record = {}
    pid = record.get("pid", "unknown")
    running = ", still running" if pid_alive(record.get("pid")) else ""
    raise StaleJournalError(f"a {what} from an earlier run exists at {path} (pid {pid}{running}): {risk}",
                            "run `hpcai-launch power restore` first")


def vendor_controls(backend, indices: list[int], restoring: bool, options: str, make) -> dict:
    """Index -> the vendor library's control (make(device)) for clocks or profiles. A
    run sets them only with the nvml/amdsmi methods; restoring takes any backend that
    holds the library (as root it works whatever the site's power method)."""
    from hpcai.errors import UsageError

    usable = getattr(backend, "name", None) in ("nvml", "amdsmi") or (
        restoring and getattr(backend, "library", None) is not None)
    if not usable:
        raise UsageError(f"{options} set through NVML or amdsmi, not the power method "
                         f"{getattr(backend, 'name', None)!r}",
                         "use --power-method nvml (NVIDIA) or amdsmi (AMD), as root")
    return {i: make(backend._device(i)) for i in indices}


def replay_side_journal(backend, path: Path, load, journal_what: str, restored_what: str, steps,
                        hint: str, force: bool = False) -> dict:
    """Put back what a killed run's clock or profile journal at path (read by load)
    recorded, GPU by GPU: steps(entry) gives, per setting of a GPU's entry, (its result
    fields, its name in a failure, restore(index)). The journal goes only when every
    setting came back; else PowerError (journal kept) carrying the summary.
    Returns {"journal", "found", "gpus": [{"index", "uuid", ..., "ok", "error"}]}."""
    from hpcai.errors import HpcaiError
    from hpcai.launcher.power.journal import remove_journal

    record = load(path)
    if record is None:
        return {"journal": str(path), "found": False, "gpus": []}
    check_restorable(record, path, force, journal_what)
    by_uuid = {g.uuid: g.index for g in backend.gpus()}
    results, failures = [], []
    for entry in record["gpus"]:
        uuid = entry.get("uuid")
        index = by_uuid.get(uuid) if uuid else int(entry["index"])
        for fields, name, restore in steps(entry):
            result = {"index": index, "uuid": uuid, **fields, "ok": False, "error": None}
            results.append(result)
            try:
                if index is None:
                    raise PowerError(f"no visible GPU has UUID {uuid}")
                restore(index)
                result["ok"] = True
            except HpcaiError as exc:
                result["error"] = exc.one_line()
                failures.append(f"GPU {entry['index']} {name}: {exc.one_line()}")
    summary = {"journal": str(path), "found": True, "gpus": results}
    if failures:
        error = PowerError(f"could not restore {restored_what} from {path}: {'; '.join(failures)}", hint)
        error.result = summary
        raise error
    remove_journal(path)
    return summary


def check_restorable(record: dict, path: Path, force: bool, what: str) -> None:
    """A journal (`what`: "clock journal", ...) is replayed only on the host that
    wrote it, once its run has ended, and never under a workload still running."""
    import socket

    host = socket.gethostname()
    if record.get("hostname") not in (None, host):
        raise PowerError(f"the {what} {path} was written on {record['hostname']}, not on this host "
                         f"({host})", "run `hpcai-launch power restore` on that node")
    if not force and pid_alive(record.get("pid")):
        raise PowerError(f"the run that wrote {path} (pid {record['pid']}) is still running",
                         "stop it first (it restores what it set when it exits), or pass --force")
    stop_or_refuse(record.get("workload"), path, force)


def stop_or_refuse(workload: dict | None, path: Path, force: bool) -> None:
    """A cap must not be lifted under a workload that still runs on it."""
    from hpcai.launcher.power import workload_procs

    pids = workload_procs.find(workload)
    if not pids:
        return
    what = workload_procs.describe(workload, pids)
    if not force:
        raise PowerError(
            f"the run that wrote {path} left {what} still running",
            f"stop it with `kill -TERM -- -{workload.get('pgid')}` and `kill -TERM "
            f"{' '.join(map(str, pids))}` (it writes an interrupted result), or pass --force "
            "to stop it and restore")
    log.warning("stopping %s", what)
    left = workload_procs.stop(workload)
    if left:
        raise PowerError(f"could not stop {workload_procs.describe(workload, left)}",
                         "stop them by hand (kill -KILL), then run `hpcai-launch power restore`")
