"""hpcai-power-helper: lets users without root cap the GPUs of their own Slurm job.

Run through `sudo -n` by the launcher's `command` power method:

    hpcai-power-helper GPU-UUID WATTS        # set one GPU's power limit
    hpcai-power-helper restore --job ID      # put back every limit set for a job
                                             # (the Slurm epilog, as root)
    hpcai-power-helper prolog | epilog       # the site's [policy] for $SLURM_JOB_ID, as root
                                             # from Slurm's Prolog=/Epilog= (prolog.py)

It takes nothing from the caller but those arguments and SUDO_UID (set by
sudo). Which jobs the caller runs on this node, and which GPUs they hold, come
from Slurm itself (`scontrol`), never from the caller's environment. Its own
settings come from a root-owned file at a fixed place, HELPER_CONFIG:

    slurm_conf = "/etc/slurm/slurm.conf"      # optional: the SLURM_CONF for scontrol
    allowed_cap_range_w = [200, 600]           # optional: the site's permitted caps
    site = "/etc/hpcai/site.toml"              # optional: take the range from this site

It uses the node's cap authority (authority.py): the GPU's lock while it
changes a limit, the first holder's original limit, and a record naming the
job, so that the epilog restores exactly what the job's runs changed.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from hpcai.errors import ConfigError, HpcaiError, PowerError, UsageError
from hpcai.gpu.base import LIMIT_MATCH_W  # validity's too: one tolerance
from hpcai.launcher.power.authority import (
    _SAFE_UUID,
    LOCK_ROOT,
    GpuAuthority,
    check_uuid,
    private_problem,
    read_private_json,
    write_private_json,
)
from hpcai.launcher.power.job_knobs import KNOB

HELPER_CONFIG = Path("/etc/hpcai/power-helper.toml")  # fixed: sudo's caller must not move it
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SCONTROL_TIMEOUT_S = 30
# The site's lines, as docs/how-to/power-helper.md shows them and the Slurm test uses
# them ({helper}: the console script's absolute path).
SUDOERS_LINE = "ALL ALL=(root) NOPASSWD: {helper}"
EPILOG_LINE = '{helper} restore --job "$SLURM_JOB_ID"'


# ---- settings ---------------------------------------------------------------------------
def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib


def _trusted_file(path: Path, what: str) -> bytes | None:
    """A root-owned file no one else can write, in folders no one else can write
    (else deleting it would lift every limit); None when absent."""
    from hpcai.ownership import chain_problem

    problem = chain_problem(path.parent)  # this user (root) or root own them all
    if problem:
        raise ConfigError(f"refusing the {what} {path}: {problem}",
                          "it and the folders above it must be owned by root and writable by root alone")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        problem = private_problem(os.fstat(f.fileno()), 0, directory=False)
        if problem:
            raise ConfigError(f"refusing the {what} {path}: {problem}",
                              "it must be owned by root and writable by root alone")
        return f.read()


def load_config(path: Path = HELPER_CONFIG) -> dict:
    """The helper's settings ({} when the file is absent), with the allowed range
    resolved: its own allowed_cap_range_w, else its site's."""
    data = _trusted_file(path, "power helper settings")
    if data is None:
        return {}
    try:
        config = _toml().loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the power helper settings {path} are not valid TOML: {exc}") from None
    if config.get("site") and config.get("allowed_cap_range_w") is None:
        from hpcai.launcher.site import config as sites

        site_path = Path(config["site"])
        if _trusted_file(site_path, "site file") is None:
            raise ConfigError(f"the site file {site_path} named in {path} does not exist")
        config["allowed_cap_range_w"] = sites.load(str(site_path))["power"].get("allowed_cap_range_w")
    cap_range = config.get("allowed_cap_range_w")
    if cap_range is not None and not (isinstance(cap_range, list) and len(cap_range) == 2
                                      and all(isinstance(v, (int, float)) for v in cap_range)
                                      and cap_range[0] < cap_range[1]):
        raise ConfigError(f"allowed_cap_range_w in {path} is not [low, high]")
    return config


# ---- Slurm: the caller's jobs and the GPUs they hold ----------------------------------------
def scontrol(config: dict, *args: str) -> str:
    env = {"PATH": SAFE_PATH}
    if config.get("slurm_conf"):
        env["SLURM_CONF"] = str(config["slurm_conf"])
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PowerError(f"cannot ask Slurm (scontrol {' '.join(args)}): {exc}",
                         "the helper needs Slurm's scontrol on this node") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PowerError(f"scontrol {' '.join(args)} failed: {last}")
    return done.stdout


def _fields(line: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def this_nodes(config: dict) -> set[str]:
    """This host's Slurm node names (a host may run several slurmd)."""
    host = socket.gethostname()
    names = set()
    for line in scontrol(config, "show", "node", "-o").splitlines():
        f = _fields(line)
        if f.get("NodeHostName") in (host, host.split(".")[0]) or f.get("NodeName") == host.split(".")[0]:
            names.add(f["NodeName"])
    return names


def _indices(spec: str) -> set[int]:
    """Slurm's IDX list: "0-1,3" -> {0, 1, 3}."""
    found: set[int] = set()
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            found.update(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            found.add(int(part))
    return found


def job_gpus_here(config: dict, job: dict, here: set[str], line: str) -> set[int] | None:
    """The GPU indices a running job holds on this node: its GRES IDX there; where
    Slurm tracks no GPUs for it, all of them if it has the node exclusively (None)."""
    nodes = set(scontrol(config, "show", "hostnames", job.get("NodeList", "")).split())
    mine = nodes & here
    if not mine:
        return set()
    held: set[int] = set()
    gres_seen = False
    for node_list, gres in re.findall(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", line):
        if "gpu" not in gres:
            continue
        gres_seen = True
        if set(scontrol(config, "show", "hostnames", node_list).split()) & here:
            for idx in re.findall(r"IDX:([0-9,\-]+)", gres):
                held |= _indices(idx)
    if gres_seen:
        return held
    return None if job.get("OverSubscribe") == "NO" else set()


def caller_job_holding(config: dict, uid: int, index: int) -> str:
    """The id of the caller's running job on this node that holds GPU `index`."""
    here = this_nodes(config)
    if not here:
        raise PowerError(f"Slurm knows no node on this host ({socket.gethostname()})",
                         "run the helper on a Slurm compute node")
    for line in scontrol(config, "show", "job", "-d", "-o").splitlines():
        job = _fields(line)
        owner = re.search(r"\((\d+)\)$", job.get("UserId", ""))
        if job.get("JobState") != "RUNNING" or not owner or int(owner.group(1)) != uid:
            continue
        held = job_gpus_here(config, job, here, line)
        if held is None or index in held:
            return job["JobId"]
    raise PowerError(f"user {uid} has no running Slurm job on this node holding GPU {index}",
                     "cap only the GPUs of your own job, from inside it")


def job_state(config: dict, job_id: str) -> str | None:
    try:
        out = scontrol(config, "show", "job", "-o", job_id)
    except PowerError:
        return None
    return _fields(out.splitlines()[0]).get("JobState") if out.strip() else None


# ---- the GPU ----------------------------------------------------------------------------------
def _device_by_uuid(library, uuid: str):
    for device in library.devices():
        if device.info().uuid == uuid:
            return device
    raise UsageError(f"no GPU on this node has UUID {uuid}", "pass a UUID that nvidia-smi -L / amd-smi list shows")


def _job_record_path(uuid: str) -> Path:
    return LOCK_ROOT / f"gpu-{uuid}.job.json"


def set_limit(uuid: str, watts: float, uid: int, config: dict) -> str:
    """Set one GPU's limit for the caller's job; returns a one-line report."""
    from hpcai.gpu import open_library

    check_uuid(uuid)
    if not math.isfinite(watts) or watts <= 0:
        raise UsageError(f"invalid power limit {watts!r} W", "give a positive number of watts")
    library = open_library("auto")
    if library is None:
        raise PowerError("no GPU management library sees a GPU on this node")
    try:
        device = _device_by_uuid(library, uuid)
        index = device.info().index
        job_id = caller_job_holding(config, uid, index)
        with GpuAuthority([uuid], f"slurm-job-{job_id}", wait_s=10.0, job_id=job_id) as authority:
            # Asked again under the lock: the job may have ended while we waited, and its
            # epilog (which takes this lock to restore) must not run before this cap lands.
            _require_job(config, uid, index, job_id)
            other = job_record_unless_another_runs(uuid, job_id, config, "wait for that job to end")
            limits = device.power_limits()
            original = authority.original_w(uuid, limits.current_w)
            _check_range(watts, limits, config, original)
            _set_checked(device, uuid, watts)
            # The prolog's clock lock or profile for this job stays recorded for its epilog.
            kept = {KNOB: other[KNOB]} if other and other.get("job_id") == job_id and KNOB in other else {}
            if abs(watts - original) <= LIMIT_MATCH_W:
                authority.forget_original(uuid)
                if kept:
                    write_private_json(_job_record_path(uuid), {**other, **authority.holder_record()})
                else:
                    _job_record_path(uuid).unlink(missing_ok=True)
            else:
                write_private_json(_job_record_path(uuid), {**authority.holder_record(), **kept})
                _undo_if_job_ended(config, uid, index, job_id, device, authority, original)
    finally:
        library.close()
    return f"GPU {uuid}: power limit {watts:g} W for Slurm job {job_id}"


def job_record_unless_another_runs(uuid: str, job_id: str, config: dict, hint: str) -> dict | None:
    """The GPU's job record (None: none); PowerError where it names another job that is
    still running (its cap, clock lock or profile holds the GPU)."""
    other = read_private_json(_job_record_path(uuid))
    if other and other.get("job_id") != job_id and job_state(config, other["job_id"]) == "RUNNING":
        raise PowerError(f"GPU {uuid} is set for Slurm job {other['job_id']} (user {other.get('user')})", hint)
    return other


def _require_job(config: dict, uid: int, index: int, job_id: str) -> None:
    if caller_job_holding(config, uid, index) != job_id:
        raise PowerError(f"Slurm job {job_id} no longer holds GPU {index} on this node", "nothing was changed")


def _set_checked(device, uuid: str, watts: float) -> None:
    device.set_power_limit_w(watts)
    got = device.power_limits().current_w
    if abs(got - watts) > LIMIT_MATCH_W:
        raise PowerError(f"GPU {uuid} reads {got:g} W after setting {watts:g} W")


def _undo_if_job_ended(config, uid, index, job_id, device, authority, original: float) -> None:
    """The job ended while its cap was being set: put the original back now, so that
    no cap outlives its job (an epilog that gave up waiting for the lock missed it)."""
    try:
        _require_job(config, uid, index, job_id)
        return
    except PowerError:
        pass
    uuid = authority.uuids[0]
    _set_checked(device, uuid, original)
    authority.forget_original(uuid)
    _restore_knob(device, uuid, read_private_json(_job_record_path(uuid)) or {})
    _job_record_path(uuid).unlink(missing_ok=True)
    raise PowerError(f"Slurm job {job_id} ended while GPU {uuid} was being capped",
                     f"its limit is back at {original:g} W")


def _check_range(watts: float, limits, config: dict, original: float) -> None:
    """The GPU's range; and, unless it puts back the limit from before any job's cap,
    the site's allowed caps and that limit (an admin's node cap): a user never
    raises a GPU above either, whatever the board's default."""
    if (limits.min_w is not None and watts < limits.min_w - LIMIT_MATCH_W) or (
            limits.max_w is not None and watts > limits.max_w + LIMIT_MATCH_W):
        raise PowerError(f"{watts:g} W is outside the GPU's range {limits.min_w:g}-{limits.max_w:g} W")
    if abs(watts - original) <= LIMIT_MATCH_W:
        return
    allowed = config.get("allowed_cap_range_w")
    if allowed and not allowed[0] <= watts <= allowed[1]:
        raise PowerError(f"{watts:g} W is outside the site's allowed caps {allowed[0]:g}-{allowed[1]:g} W",
                         "pick a cap in that range")
    if watts > original + LIMIT_MATCH_W:
        raise PowerError(f"{watts:g} W is above the GPU's limit before any job's cap ({original:g} W, "
                         "set by the site)", f"pick a cap of at most {original:g} W")


def restore_job(job_id: str, uid: int | None, config: dict) -> list[str]:
    """Every limit set for this job back at its first holder's original, each read
    and restored under its GPU's lock (a cap being set now lands first, or is refused).
    A GPU that cannot be restored (lost) does not stop the others: PowerError after
    them, naming it, its record kept for a later restore."""
    from hpcai.gpu import open_library

    if not re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id):
        raise UsageError(f"{job_id!r} is not a Slurm job id")
    recorded = _recorded_gpus()
    for uuid in recorded:  # before anything changes: only root or the job's owner
        record = read_private_json(_job_record_path(uuid)) or {}
        if uid is not None and record.get("job_id") == job_id and record.get("uid") != uid:
            raise PowerError(f"Slurm job {job_id} is not yours", "only root or the job's owner may restore it")
    library = open_library("auto")
    done, failures = [], []
    try:
        devices = {d.info().uuid: d for d in library.devices()} if library is not None else {}
        # Every GPU of the node (a cap being set now has no record yet) and every
        # recorded one (a lost GPU is not among the devices).
        for uuid in sorted(set(devices) | set(recorded)):
            try:
                done += _restore_for_job(uuid, job_id, devices)
            except HpcaiError as exc:
                failures.append(exc.one_line())
    finally:
        if library is not None:
            library.close()
    if failures:
        restored = f"{'; '.join(done)}; " if done else ""
        raise PowerError(f"{restored}could not restore {'; '.join(failures)}",
                         f"run `hpcai-power-helper restore --job {job_id}` again once the GPU is back "
                         "(its record is kept)")
    return done


def _recorded_gpus() -> list[str]:
    """The GPUs whose job record is in the node's authority folder."""
    if not LOCK_ROOT.is_dir():
        return []
    names = {p.name[len("gpu-"):-len(".job.json")] for p in LOCK_ROOT.glob("gpu-*.job.json")}
    return sorted(n for n in names if _SAFE_UUID.match(n))


def _restore_for_job(uuid: str, job_id: str, devices: dict) -> list[str]:
    authority = _epilog_lock(uuid, job_id)
    if authority is None:
        return []
    try:
        record = read_private_json(_job_record_path(uuid))
        if not record or record.get("job_id") != job_id:
            return []
        device = devices.get(uuid)
        if device is None:
            raise PowerError(f"GPU {uuid}: it is unreachable (lost, or gone from this node) and may still be capped")
        original = read_private_json(LOCK_ROOT / f"gpu-{uuid}.original.json") or {}
        want = original.get("limit_w")
        line = []
        if isinstance(want, (int, float)):
            try:
                _set_checked(device, uuid, float(want))
            except HpcaiError as exc:  # e.g. lost now: name the GPU, its record stays
                raise PowerError(f"GPU {uuid}: {exc.message}; it may still be capped") from None
            authority.forget_original(uuid)
            line = [f"GPU {uuid}: restored to {want:g} W"]
        line += _restore_knob(device, uuid, record)
        _job_record_path(uuid).unlink(missing_ok=True)
        return line
    finally:
        authority.__exit__(None, None, None)


def _restore_knob(device, uuid: str, record: dict) -> list[str]:
    """The prolog's SM clock lock or power profile put back (launcher/power/job_knobs.py);
    PowerError where it cannot be (the record stays for a later restore)."""
    if KNOB not in record:
        return []
    from hpcai.launcher.power import job_knobs

    try:
        return [f"GPU {uuid}: {job_knobs.restore(device, record[KNOB])}"]
    except HpcaiError as exc:
        raise PowerError(f"GPU {uuid}: {exc.message}; its clocks or power profile may still be set") from None


def _epilog_lock(uuid: str, job_id: str):
    """The GPU's lock for the epilog; None where another run holds it whose GPU carries
    no record of this job (a root run's hours-long hold must not stall the epilog)."""
    from hpcai.launcher.power.authority import GpuBusyError

    try:
        return GpuAuthority([uuid], f"slurm-job-{job_id}-restore", job_id=job_id).__enter__()
    except GpuBusyError:
        holder = read_private_json(LOCK_ROOT / f"gpu-{uuid}.holder.json") or {}
        record = read_private_json(_job_record_path(uuid)) or {}
        if job_id not in (holder.get("job_id"), record.get("job_id")):
            return None
    # A cap for this job being set now: wait for it, then restore it.
    return GpuAuthority([uuid], f"slurm-job-{job_id}-restore", wait_s=30.0, job_id=job_id).__enter__()


# ---- the command ----------------------------------------------------------------------------
def _caller_uid() -> int | None:
    """SUDO_UID (sudo sets it, the caller cannot); None when root ran us directly."""
    if os.geteuid() != 0:
        raise PowerError("hpcai-power-helper must run as root", "run it through sudo -n (see the site's sudoers)")
    value = os.environ.get("SUDO_UID")
    if value is None:
        return None
    if not value.isdigit():
        raise UsageError(f"SUDO_UID {value!r} is not a user id")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="hpcai-power-helper", description=__doc__.split("\n")[0])
    parser.add_argument("target", help="a GPU UUID, or `restore`")
    parser.add_argument("watts", nargs="?", help="the power limit to set, W")
    parser.add_argument("--job", help="restore: the Slurm job whose limits come back")
    args = parser.parse_args(argv)
    try:
        uid = _caller_uid()
        config = load_config()
        if args.target == "restore":
            if not args.job or args.watts is not None:
                raise UsageError("restore takes --job ID and nothing else")
            for line in restore_job(args.job, uid, config) or [f"nothing to restore for job {args.job}"]:
                print(line)
            return 0
        if args.job or args.watts is None:
            raise UsageError("give a GPU UUID and a number of watts")
        if uid is None:
            raise UsageError("setting a limit is for users through sudo (SUDO_UID)",
                             "as root, use hpcai-launch --power-method nvml|amdsmi")
        try:
            watts = float(args.watts)
        except ValueError:
            raise UsageError(f"{args.watts!r} is not a number of watts") from None
        print(set_limit(args.target, watts, uid, config))
        return 0
    except HpcaiError as exc:
        print(f"hpcai-power-helper: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
