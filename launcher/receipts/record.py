"""`hpcai-job-receipt start|end`: the receipt's two halves, as root, from the Slurm
prolog and epilog.

start: Slurm's facts about the job and its GPUs here, each GPU's counters and
settings, the node meter's power; written as the start file in the spool.
end: the same read again, the start file read back, energy per GPU and for the
node, the end state, a GPU that was there at the start and is gone or
unreadable now named as lost; the receipt written, then the start file removed.
Both halves record the node's measurement tier (launcher/tier.py) and then turn
the start files of runs that ended without their epilog (a failed node) into
receipts (leftovers()).
"""
from __future__ import annotations

import datetime
import socket
import time

from hpcai.launcher.receipts import gpus as gpu_reads
from hpcai.errors import HpcaiError
from hpcai.launcher.receipts import slurm, spool

FORMAT = 1
# The tier's fields a receipt keeps (launcher/tier.py current_tier has a few more).
TIER_FIELDS = ("tier", "agreement_within_frac", "stated_agreement_frac", "meter_api", "calibrated", "reason")


def _utc(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_power(site_raw: dict) -> dict:
    """The node meter's power now ({source, power_w}), where the site configures one;
    {} where it has none or it does not answer (the receipt says so, nothing fails)."""
    section = site_raw.get("node_power") or {}
    if not section.get("sources"):
        return {}
    from hpcai.measure.node_power import open_sources  # here: a node without a meter never loads it

    runs, status = open_sources(section)
    try:
        for run in runs:
            node = [c.name for c in run.source.channels if c.scope == "node"]
            if node:
                sample = run.source.read()
                return {"source": run.source.kind, "power_w": sample.power_w.get(node[0]), "t": time.time()}
        return {"source": None, "problem": "; ".join(s.get("detail", "") for s in status) or "no node channel"}
    except Exception as exc:  # noqa: BLE001 (a meter that fails must not cost the receipt)
        return {"source": runs[0].source.kind if runs else None, "problem": str(exc)[:200]}
    finally:
        for run in runs:
            run.source.close()


def policy_cap(site_raw: dict, partition: str | None, model: str) -> float | None:
    """The site policy's default cap for this partition and GPU model (formats.md)."""
    for entry in (site_raw.get("policy") or {}).get("default", []) or []:
        if entry.get("partition") == partition and str(entry.get("gpu", "")).upper() == model.upper():
            return entry.get("cap_w")
    return None


def read_gpus(job: dict, site_raw: dict) -> tuple[list, list]:
    """The job's GPUs here, read now (none opened where Slurm gives the job none)."""
    from hpcai.gpu import open_library

    if job["gpu_indices"] == set():
        return [], []
    library = open_library(site_raw.get("gpu", {}).get("vendor", "auto"))
    if library is None:
        return [], []
    try:
        return gpu_reads.read_job_gpus(library, job["gpu_indices"])
    finally:
        gpu_reads.close_quietly(library)


def tier(site_raw: dict) -> dict:
    """This node's measurement tier now, from the site the receipt command loaded."""
    from hpcai.launcher.site.tier import current_tier

    found = current_tier(site_raw)
    return {k: found.get(k) for k in TIER_FIELDS}


def start(config: dict, site_raw: dict, job_id: str) -> str:
    """The prolog's half, for the job Slurm knows by job_id; returns the line it prints."""
    job = slurm.job_here(config, job_id)
    return begin(job, site_raw) + leftovers(config, site_raw, job)


def end(config: dict, site_raw: dict, job_id: str) -> str:
    """The epilog's half; returns the line it prints."""
    job = slurm.job_here(config, job_id)
    return finish(job, site_raw) + leftovers(config, site_raw, job)


def begin(job: dict, site_raw: dict) -> str:
    """The start file for a job (slurm.job_here's facts) and its GPUs read now."""
    found, unreadable = read_gpus(job, site_raw)
    now = time.time()
    record = {"format": FORMAT, "kind": "hpcai-job-receipt-start", "host": socket.gethostname(),
              **{k: v for k, v in job.items() if k not in ("gpu_indices", "end_state", "exit_code")},
              "t": now, "start": _utc(now), "state": "open", "gpus": found, "unreadable_gpus": unreadable,
              "node_meter": node_power(site_raw), "tier": tier(site_raw)}
    with spool.open_spool(spool.spool_path(site_raw), create=True) as folder:
        path = spool.write(folder, spool.receipt_name(job["job_id"], job["restarts"], job["node"], start=True),
                           record)
    return f"receipt started for job {job['job_id']}: {len(found)} GPU(s), {path}"


def finish(job: dict, site_raw: dict) -> str:
    """The complete receipt from the start file and the GPUs read now; the start file
    is removed only once the receipt is written."""
    found, unreadable = read_gpus(job, site_raw)
    node = node_power(site_raw)
    with spool.open_spool(spool.spool_path(site_raw), create=True) as folder:
        job, start_name, began = _started_run(folder, job)
        receipt = {**build(job, began, found, unreadable, node, site_raw), "tier": tier(site_raw)}
        path = spool.write(folder, spool.receipt_name(job["job_id"], job["restarts"], job["node"]), receipt)
        spool.remove(folder, start_name)
    lost = f", lost: {', '.join(receipt['lost_gpus'])}" if receipt["lost_gpus"] else ""
    return f"receipt for job {job['job_id']} ({receipt['state']}): {len(receipt['gpus'])} GPU(s){lost}, {path}"


def _started_run(folder, job: dict) -> tuple[dict, str, dict | None]:
    """(the job's facts for the run that ended, its start file's name, its start record).
    A job requeued while it ran (scontrol requeue, a preemption that requeues) reaches
    its epilog with Slurm's restart count already raised: the latest start file
    below that count is this run's, and the run ended by being requeued."""
    for restarts in range(job["restarts"], -1, -1):
        name = spool.receipt_name(job["job_id"], restarts, job["node"], start=True)
        began = spool.read(folder, name)
        if began is not None:
            if restarts < job["restarts"]:
                job = {**job, "restarts": restarts, "end_state": "requeued"}
            return job, name, began
    return job, spool.receipt_name(job["job_id"], job["restarts"], job["node"], start=True), None


def build(job: dict, began: dict | None, found: list, unreadable: list, node_end: dict,
          site_raw: dict) -> dict:
    """The complete receipt from the start record (None: the prolog left none) and
    what the epilog read now."""
    now = time.time()
    began = began or {}
    starts = {g["uuid"]: g for g in began.get("gpus", [])}
    t0 = began.get("t")
    gpus = [_gpu_entry(job, starts.get(g["uuid"]), g, site_raw) for g in found]
    now_seen = {g["uuid"] for g in found}
    lost = sorted(u for u in starts if u not in now_seen)
    gpus += [_gpu_entry(job, starts[u], None, site_raw) for u in lost]
    problems = [] if began else ["no start record (the prolog did not run or could not write it)"]
    problems += [f"GPU {u['index']} unreadable at the end: {u['reason']}" for u in unreadable]
    problems += [f"node meter at the {half}: {m['problem']}" for half, m in
                 (("start", began.get("node_meter") or {}), ("end", node_end)) if m.get("problem")]
    node_j, node_method = _node_energy(began.get("node_meter") or {}, node_end)
    return {
        "format": FORMAT, "kind": "hpcai-job-receipt", "host": socket.gethostname(),
        **{k: job[k] for k in ("job_id", "node", "user", "uid", "account", "partition", "job_name",
                               "qos", "restarts", "slurm_state", "exit_code")},
        "state": job["end_state"], "gpu_count": len(gpus),
        "start": began.get("start"), "end": _utc(now),
        "duration_s": now - t0 if t0 is not None else None,
        "gpus": gpus, "lost_gpus": lost,
        "node_energy_j": node_j, "node_energy_method": node_method,
        "node_power_start_w": (began.get("node_meter") or {}).get("power_w"),
        "node_power_end_w": node_end.get("power_w"),
        "node_source": node_end.get("source") or (began.get("node_meter") or {}).get("source"),
        "problems": problems,
    }


def _gpu_entry(job: dict, start: dict | None, end: dict | None, site_raw: dict) -> dict:
    either = end or start
    energy, method = gpu_reads.energy_over_job(start, end) if start and end else (None, None)
    cap = either.get("cap_w")
    return {
        "uuid": either["uuid"], "index": either["index"], "model": either["model"],
        "model_full": either.get("model_full"), "lost": end is None,
        "energy_start_j": (start or {}).get("energy_j"), "energy_end_j": (end or {}).get("energy_j"),
        "energy_j": energy, "energy_method": method,
        "power_start_w": (start or {}).get("power_w"), "power_end_w": (end or {}).get("power_w"),
        "cap_w": cap, "cap_start_w": (start or {}).get("cap_w"), "default_cap_w": either.get("default_cap_w"),
        "cap_set_by": gpu_reads.cap_set_by(either["uuid"], cap, either.get("default_cap_w"), job["job_id"],
                                           policy_cap(site_raw, job["partition"], either["model"])),
        "sm_clock_mhz": either.get("sm_clock_mhz"), "memory_clock_mhz": either.get("memory_clock_mhz"),
        "clocks_set_by": gpu_reads.clocks_set_by(either["uuid"]),
    }


def _node_energy(start: dict, end: dict) -> tuple[float | None, str | None]:
    p0, p1, t0, t1 = start.get("power_w"), end.get("power_w"), start.get("t"), end.get("t")
    if None in (p0, p1, t0, t1) or t1 < t0:
        return None, None
    return (p0 + p1) / 2 * (t1 - t0), "two-point-power"


def leftovers(config: dict, site_raw: dict, job: dict) -> str:
    """Each start file in the spool for this node, of another job, whose run Slurm says
    is over (slurm.leftover_state) becomes its receipt; returns what to add to the printed
    line. A job still running here is left alone; a file Slurm cannot answer for now
    (the controller down) is left for the next prolog or epilog."""
    done, skipped = [], []
    with spool.open_spool(spool.spool_path(site_raw), create=True) as folder:
        for name in spool.start_files(folder, job["node"]):
            began = spool.read(folder, name)
            if not _names_its_file(began, name) or began["job_id"] == job["job_id"]:
                continue
            try:
                state = slurm.leftover_state(config, began["job_id"], began["restarts"], job["node"])
                if state is not None:
                    _file_leftover(folder, name, began, state, site_raw)
                    done.append(f"{began['job_id']} ({state})")
            except HpcaiError as exc:
                skipped.append(f"{began['job_id']}: {exc.one_line()}")
    said = f"; receipts for runs that ended without their epilog: {', '.join(done)}" if done else ""
    return said + (f"; left for later: {'; '.join(skipped)}" if skipped else "")


def _names_its_file(began: dict | None, name: str) -> bool:
    """A start record whose job, restart count and node are those its file's name gives."""
    try:
        return spool.receipt_name(slurm.check_job_id(began["job_id"]), int(began["restarts"]),
                                  began["node"], start=True) == name
    except (TypeError, KeyError, ValueError, HpcaiError):
        return False


def _file_leftover(folder, name: str, began: dict, state: str, site_raw: dict) -> None:
    """The receipt of a run whose epilog never ran: its start figures kept, its energy
    unknown (nothing read the counters at its end), written unless an epilog's complete
    receipt is there already; then the start file removed."""
    final = spool.receipt_name(began["job_id"], began["restarts"], began["node"])
    if spool.read(folder, final) is None:
        spool.write(folder, final, leftover_receipt(began, state, site_raw))
    spool.remove(folder, name)


def leftover_receipt(began: dict, state: str, site_raw: dict) -> dict:
    job = {**began, "end_state": state, "slurm_state": None, "exit_code": None}
    # Who set the cap and clocks is read at the end, against the holders then: unknown here.
    gpus = [{**_gpu_entry(job, g, None, site_raw), "lost": False, "cap_set_by": None, "clocks_set_by": None}
            for g in began.get("gpus", [])]
    why = ("the node failed before the job's epilog ran" if state == "node-failed"
           else "the job ended without its epilog on this node and Slurm no longer knows it")
    return {
        "format": FORMAT, "kind": "hpcai-job-receipt", "host": socket.gethostname(),
        **{k: job.get(k) for k in ("job_id", "node", "user", "uid", "account", "partition", "job_name",
                                   "qos", "restarts", "slurm_state", "exit_code")},
        "state": state, "gpu_count": len(gpus), "start": began.get("start"), "end": None, "duration_s": None,
        "gpus": gpus, "lost_gpus": [], "node_energy_j": None, "node_energy_method": None,
        "node_power_start_w": (began.get("node_meter") or {}).get("power_w"), "node_power_end_w": None,
        "node_source": (began.get("node_meter") or {}).get("source"),
        "problems": [f"energy unknown: {why}, so no end reading was taken"],
        "tier": began.get("tier") or {},
    }
