"""The run as an MLPerf-format log (mllog.txt), written through the
mlperf-logging package's mllog, so tools built for MLPerf logs read hpcai runs.

Written once the run is over, from what the run recorded (epoch times, the
result's throughput, the power samples), each event stamped with the time it
happened (time_ms): nothing is logged inside the measured window.

Power follows MLPerf Power's keys: power_measurement_start/stop around the
measured window and one power_reading (W, the node's measured devices summed)
per sample, with metadata host = the node, as MLPerf's power_measurement
example does (mlperf_logging/mllog/examples/power/power_measurement.py).
"""
from __future__ import annotations

import logging
from pathlib import Path

MLLOG_FILE = "mllog.txt"
MISSING = "mlperf-logging is not installed (pip install 'hpcai[mlperf]')"


def power_samples(sampler, t0: float, t1: float) -> list[tuple[float, float]]:
    """(time, W summed over the sources) of each sample in [t0, t1] where every source read power."""
    out = []
    for t, row in zip(sampler.times, sampler.readings):
        if t0 <= t <= t1 and row and all(r is not None and r.power_w is not None for r in row):
            out.append((t, sum(r.power_w for r in row)))
    return out


def write(path: Path, doc: dict, samples: list[tuple[float, float]]) -> str | None:
    """Write doc (a result document) as an MLPerf log at path; None when
    written, else why not."""
    try:
        from mlperf_logging.mllog import constants as C
        from mlperf_logging.mllog.mllog import MLLogger
    except ImportError:
        return MISSING
    logger = logging.getLogger(f"hpcai.mllog.{id(doc)}")  # a private logger: this file only
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    logger.addHandler(handler)
    try:
        _events(MLLogger(logger=logger), C, doc, samples)
    finally:
        logger.removeHandler(handler)
        handler.close()
    return None


def _ms(t: float) -> int:
    return int(round(t * 1000))


def _events(ml, C, doc: dict, samples) -> None:
    node = (doc.get("host") or {}).get("node") or "node_0"
    epochs = doc.get("epochs") or []
    config, tp, power = doc.get("config") or {}, doc.get("throughput") or {}, doc.get("power") or {}
    begin = _ms(epochs[0]["start"]) if epochs else None
    end = _ms(epochs[-1]["end"]) if epochs else None
    ml.event(C.SUBMISSION_BENCHMARK, doc["workload"], time_ms=begin)
    ml.event(C.SUBMISSION_ORG, "hpcai", time_ms=begin)
    gpus = [g["name"] for g in doc.get("gpus") or [] if g.get("used")]
    ml.event(C.SUBMISSION_PLATFORM, f"{len(gpus)}x{gpus[0]}" if gpus else (doc.get("host") or {}).get("cpu_model"),
             time_ms=begin)
    if config.get("global_batch_size"):
        ml.event(C.GLOBAL_BATCH_SIZE, config["global_batch_size"], time_ms=begin)
    ml.event(C.EPOCH_COUNT, len(epochs), time_ms=begin)
    ml.start(C.RUN_START, time_ms=begin, metadata={"run_id": doc["run_id"]})
    window = (doc.get("timestamps") or {})
    if samples:
        ml.start(C.POWER_MEASUREMENT_START, time_ms=_ms(window.get("measured_start") or samples[0][0]),
                 metadata={"host": node})
        for t, watts in samples:
            ml.event(C.POWER_READING, watts, time_ms=_ms(t), metadata={"host": node, "unit": "W"})
    for e in epochs:
        meta = {C.EPOCH_NUM: e["index"] + 1, "warmup": e["warmup"]}
        ml.start(C.EPOCH_START, time_ms=_ms(e["start"]), metadata=meta)
        ml.end(C.EPOCH_STOP, time_ms=_ms(e["end"]),
               metadata={**meta, "samples_count": e["units"], "duration_s": e["duration_s"]})
    if samples:
        ml.end(C.POWER_MEASUREMENT_STOP, time_ms=_ms(window.get("measured_end") or samples[-1][0]),
               metadata={"host": node})
    # hpcai's own figures, under their own keys: MLPerf Training has no throughput key.
    ml.event("throughput", tp.get("node"), time_ms=end,
             metadata={"unit": tp.get("unit"), "basis": "node", "per_gpu": tp.get("per_gpu"),
                       "devices_node": tp.get("devices_node")})
    if power.get("energy_j") is not None:
        ml.event("energy", power["energy_j"], time_ms=end,
                 metadata={"unit": "J", "window_s": power.get("window_s"),
                           "units_per_joule": power.get("units_per_joule")})
    status = C.SUCCESS if doc.get("status") == "complete" else C.ABORTED
    ml.end(C.RUN_STOP, time_ms=end, metadata={C.STATUS: status, "hpcai_status": doc.get("status")})
