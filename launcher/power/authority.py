"""The node's one authority over GPU limits: a per-GPU exclusive lock.

Whoever changes a GPU's power limit or clocks first takes an flock on
``/run/hpcai/gpu-<UUID>.lock`` (the kernel drops it when the holder dies),
for every GPU of the run in sorted UUID order (two runs never deadlock), and
only then writes its journal. The folder is fixed: no environment variable or
option moves it, so two launchers with different HOME, XDG_STATE_HOME,
HPCAI_STATE_DIR, site state_dir or --journal still meet here.

Beside each lock:
- ``gpu-<UUID>.holder.json``: who holds it (pid, user, run id, since; an
  in-run sweep's current segment and its cap), for the one-line refusal of a
  second run, an uncapped run's validity and the metrics exporter;
- ``gpu-<UUID>.original.json``: the limit the GPU had before the FIRST holder
  changed it, kept until that limit is back. A run after a holder that died
  with the cap applied restores this value, never the dead run's cap.

Everything here is created root-owned, 0600 in a 0700 folder, without
following links; a folder or file that is not ours is refused, not trusted.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import re
import socket
import time
from pathlib import Path

from hpcai.errors import PowerError
from hpcai.ownership import stat_problem

# Fixed on purpose (see the module docstring); tests isolate by GPU UUID.
LOCK_ROOT = Path("/run/hpcai")
POLL_S = 0.2
PROBE_GRACE_S = 0.5
# A run queued behind a holder says so after this long (a shorter wait that runs
# out ends in its one-line refusal alone).
WAIT_NOTICE_S = 3.0
_SAFE_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class GpuBusyError(PowerError):
    """Another run holds a GPU of this one."""


def check_uuid(uuid: str | None) -> str:
    if not isinstance(uuid, str) or not _SAFE_UUID.match(uuid):
        raise PowerError(f"GPU UUID {uuid!r} cannot name a lock file",
                         "the GPU library reported an unusual UUID; ask the site admins")
    return uuid


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_private_dir(path: Path, create: bool) -> Path:
    """The lock folder: a real folder (no link), owned by us, 0700 or stricter."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise PowerError(f"cannot create the node's cap authority {path}: {exc.strerror}",
                             "change limits as root, or through the site's hpcai-power-helper") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PowerError(f"the node's cap authority {path} does not exist",
                         "a root launcher or hpcai-power-helper creates it") from None
    problem = private_problem(st, os.geteuid(), directory=True)
    if problem:
        raise PowerError(f"refusing the cap authority folder {path}: {problem}", _MOVE_ASIDE.format(path=path))
    return path


# Removing the folder (or a lock in it) while a run holds a lock would let a second
# run lock a new file beside the first: first make sure no run holds one.
_MOVE_ASIDE = ("make sure no hpcai run or hpcai-power-helper is using it (`fuser -v {path}`, "
               "`ls -l /proc/*/fd | grep {path}`), then move it aside as root (`mv {path} {path}.bad`); "
               "root creates it again, 0700")


def private_problem(st: os.stat_result, uid: int, directory: bool) -> str | None:
    """Why a file or folder must not be trusted by `uid`: hpcai/ownership.py's check with
    `uid` the only owner; None when it may be."""
    return stat_problem(st, "it", owners={uid}, kind="folder" if directory else "file")


def _open_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    problem = private_problem(os.fstat(fd), os.geteuid(), directory=False)
    if problem:
        os.close(fd)
        raise PowerError(f"refusing the GPU lock {path}: {problem}", _MOVE_ASIDE.format(path=path))
    return fd


def names_locked_file(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (a lock on a file that was
    removed or replaced since it was opened guards nothing)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def orphaned_holders(path: Path) -> list[int]:
    """Live processes holding an flock on a removed `path`: a holder whose lock
    folder (or lock file) was deleted under it still guards its GPU, though no new
    lock at `path` can tell. The kernel lists every flock (/proc/locks: pid and
    inode) and names a removed file "<path> (deleted)" in /proc/PID/fd."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    try:
        folder = os.stat(path.parent).st_dev
    except OSError:
        return []
    device = f"{os.major(folder):02x}:{os.minor(folder):02x}"  # /proc/locks: MAJ:MIN:INODE
    gone, found = f"{path} (deleted)", []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or not fields[4].isdigit():
            continue
        pid, (where, _, inode) = int(fields[4]), fields[5].rpartition(":")
        if where == device and pid != os.getpid() and pid not in found and _holds_removed(pid, inode, gone):
            found.append(pid)
    return found


def _holds_removed(pid: int, inode: str, gone: str) -> bool:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == gone and str(os.stat(f"/proc/{pid}/fd/{name}").st_ino) == inode:
                return True
        except OSError:
            continue
    return False


def read_private_json(path: Path) -> dict | None:
    """A record we wrote: None when absent, unreadable or not ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if private_problem(os.fstat(fd), os.geteuid(), directory=False):
            return None
        with os.fdopen(fd, "r", encoding="utf-8") as f:
            fd = -1
            record = json.load(f)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def write_private_json(path: Path, record: dict) -> None:
    """Atomically, 0600, through hpcai/safe_files.py (no link followed, synced)."""
    from hpcai.safe_files import Folder

    with Folder.open(path.parent) as folder, folder.replacing(path.name, mode=0o600, durable=True) as f:
        f.write(json.dumps(record, indent=1).encode())


def describe_holder(record: dict | None) -> str:
    if not record:
        return "another process (its holder record is not readable yet)"
    what = f"pid {record.get('pid')}, user {record.get('user')}, run {record.get('run_id')}"
    if record.get("job_id"):
        what += f", Slurm job {record['job_id']}"
    return f"{what}, since {record.get('since')}"


def holder_of(uuid: str, root: Path = LOCK_ROOT) -> dict | None:
    """Who holds this GPU now (None: nobody, or the authority is not readable).
    A record whose lock is free is a dead holder's: ignored."""
    lock = root / f"gpu-{uuid}.lock"
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return read_private_json(root / f"gpu-{uuid}.holder.json") or {}
            return None
        return None  # we got it: nobody holds it
    finally:
        os.close(fd)  # drops a shared lock we may have taken


def original_of(uuid: str, root: Path = LOCK_ROOT) -> dict | None:
    """The limits the first holder recorded and nobody restored yet."""
    return read_private_json(root / f"gpu-{uuid}.original.json")


class GpuAuthority:
    """Context manager: the exclusive locks of some GPUs, held for a run.

    wait_s: 0 refuses a held GPU at once; more waits up to that many seconds.
    """

    def __init__(self, uuids: list[str], run_id: str | None, wait_s: float = 0.0,
                 root: Path = LOCK_ROOT, job_id: str | None = None, on_wait=None):
        self.uuids = sorted({check_uuid(u) for u in uuids})
        # on_wait(uuid, holder): told once per GPU, WAIT_NOTICE_S into a wait behind
        # a holder, so that a waiting run does not look hung.
        self.on_wait = on_wait
        self.run_id, self.wait_s, self.root, self.job_id = run_id, float(wait_s), Path(root), job_id
        self._fds: dict[str, int] = {}
        self.record: dict = {}  # the holder record this run wrote (mark_segment adds to it)
        self.held = False

    def __enter__(self) -> GpuAuthority:
        check_private_dir(self.root, create=True)
        # A moment's grace even without waiting: holder_of() (an uncapped run's
        # look) holds a shared lock for an instant, which must not refuse a run.
        self._started = time.monotonic()
        deadline = self._started + max(PROBE_GRACE_S, self.wait_s)
        try:
            while True:
                for uuid in self.uuids:  # sorted: two runs never wait on each other in a circle
                    self._take(uuid, deadline)
                if not self.lost_locks():  # after the waits for the later GPUs, the earlier still ours
                    break
                self._release()
            self.record = self.holder_record()
            for uuid in self.uuids:
                write_private_json(self.root / f"gpu-{uuid}.holder.json", self.record)
        except BaseException:
            self._release()
            raise
        self.held = True
        return self

    def holder_record(self) -> dict:
        uid = os.getuid()
        sudo_uid = os.environ.get("SUDO_UID") if self.job_id else None
        uid = int(sudo_uid) if sudo_uid and sudo_uid.isdigit() else uid
        return {"pid": os.getpid(), "uid": uid, "user": _user_name(uid), "run_id": self.run_id,
                "job_id": self.job_id, "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "since_unix": time.time()}

    def mark_segment(self, index: int, cap_w: float) -> None:
        """An in-run sweep's segment changed: each held GPU's holder record names it
        (readers that know no segment ignore the keys). Only where the lock is still
        ours and the record still this process's: never another holder's record."""
        for uuid, fd in self._fds.items():
            path = self.root / f"gpu-{uuid}.holder.json"
            if not names_locked_file(self.root / f"gpu-{uuid}.lock", fd):
                continue
            if (read_private_json(path) or {}).get("pid") != os.getpid():
                continue
            write_private_json(path, {**self.record, "segment": int(index), "segment_cap_w": float(cap_w)})

    def _take(self, uuid: str, deadline: float) -> None:
        """The GPU's lock, on the file its path names now (re-checked after every
        wait: the folder may have been removed meanwhile), with no holder left
        orphaned on a removed one."""
        path = self.root / f"gpu-{uuid}.lock"
        told = self.on_wait is None or self.wait_s <= 0
        while True:
            check_private_dir(self.root, create=True)
            fd = _open_lock(path)
            orphans = orphaned_holders(path)
            if not orphans and self._try_flock(fd, uuid):  # closes fd when it raises
                if names_locked_file(path, fd):
                    self._fds[uuid] = fd
                    return
                os.close(fd)  # removed or replaced while we waited: lock the file there now
                continue
            os.close(fd)
            if time.monotonic() >= deadline:
                raise self._busy(uuid, orphans)
            if not told and time.monotonic() >= self._started + WAIT_NOTICE_S:
                told = True
                self.on_wait(uuid, describe_holder(read_private_json(self.root / f"gpu-{uuid}.holder.json")))
            time.sleep(POLL_S)

    @staticmethod
    def _try_flock(fd: int, uuid: str) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise PowerError(f"cannot lock GPU {uuid}: {exc}") from exc
            return False

    def _busy(self, uuid: str, orphans: list[int]) -> GpuBusyError:
        waited = f" after waiting {self.wait_s:g} s" if self.wait_s > 0 else ""
        if orphans:
            holder = (f"pid {', '.join(map(str, orphans))}, whose lock file {self.root}/gpu-{uuid}.lock "
                      "was removed under it")
        else:
            holder = describe_holder(read_private_json(self.root / f"gpu-{uuid}.holder.json"))
        return GpuBusyError(f"GPU {uuid} is held by another run{waited} ({holder})",
                            "wait for it to end, or pass --wait-for-gpus SECONDS to queue behind it")

    def lost_locks(self) -> list[str]:
        """The GPUs whose lock path no longer names the file this run locked."""
        return [u for u, fd in self._fds.items() if not names_locked_file(self.root / f"gpu-{u}.lock", fd)]

    # ---- the first holder's limits ----------------------------------------------------------
    def original_w(self, uuid: str, current_w: float) -> float:
        """The limit to restore: the one recorded by a holder before us that never
        restored it (it died), else the current one, recorded now, before any change."""
        self._require(uuid)
        path = self.root / f"gpu-{uuid}.original.json"
        record = read_private_json(path) or {}
        if isinstance(record.get("limit_w"), (int, float)):
            return float(record["limit_w"])
        write_private_json(path, {"uuid": uuid, "limit_w": float(current_w),
                                  "recorded_by": self.holder_record()})
        return float(current_w)

    def forget_original(self, uuid: str) -> None:
        """The GPU is back at its original limit: the next holder records afresh."""
        self._require(uuid)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / f"gpu-{uuid}.original.json")

    def _require(self, uuid: str) -> None:
        if uuid not in self._fds:
            raise PowerError(f"GPU {uuid} is not held by this run", "this is a bug in hpcai")

    # ---- release ------------------------------------------------------------------------
    def _release(self) -> None:
        for uuid, fd in list(self._fds.items()):
            with contextlib.suppress(OSError):
                if (read_private_json(self.root / f"gpu-{uuid}.holder.json") or {}).get("pid") == os.getpid():
                    os.unlink(self.root / f"gpu-{uuid}.holder.json")
            os.close(fd)  # the kernel drops the flock with the last descriptor
        self._fds.clear()

    def __exit__(self, *exc) -> bool:
        self._release()
        self.held = False
        return False


def authority_applies(backend) -> bool:
    """Root takes the node's lock itself. A user without root cannot: with the
    `command` method the site's helper (helper.py) takes it for them;
    otherwise setting needs root anyway and fails at the vendor library."""
    if getattr(backend, "name", None) == "command" and "hpcai-power-helper" in getattr(backend, "template", ""):
        return False  # the helper takes the lock for each change it makes
    return os.geteuid() == 0
