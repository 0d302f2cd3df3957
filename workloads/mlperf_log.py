"""The run as an MLPerf-format log (mllog.txt), written through the
mlperf-logging package's mllog, so tools built for MLPerf logs read hpcai runs.

Written once the run is over, from what the run recorded (epoch times, the
result's throughput, the power samples), each event stamped with the time it
happened (time_ms): nothing is logged inside the measured window.

The log's timed span is the measured window: warm-up epochs sit between
init_start and init_stop, run_start opens the first measured epoch and
run_stop closes the last, so MLCommons' time to train is the window hpcai's
energy covers. Power follows MLPerf Power's layout: not in the run log but in
power/<log name>/node_<k>.txt beside it (mlperf_logging/result_summarizer/
result_summarizer.py _compute_total_power reads power/<result>/node_*.txt,
package_checker/power_checker.py checks the names), each with
power_measurement_start/stop and one power_reading per sample, spanning the
samples that bracket the window (the first at or before it, the last at or
after it), so MLCommons' energy (mean reading x time to train) covers the
whole timed span. Readings are the node's power where a node-scope source
measured it, else the sum of the node's GPUs, labelled GPU-only. Sample
counts are the node's (every rank's units), and run_stop says success only
for a complete run whose validity did not fail.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path

from hpcai.safe_files import _DIR_FLAGS, Folder
from hpcai.install import install_hint

MLLOG_FILE = "mllog.txt"
POWER_DIR = "power"  # MLPerf Power: power/<log name>/node_<k>.txt beside the log
MISSING = f"mlperf-logging is not installed ({install_hint('mlperf')})"
GPU_ONLY = "GPU boards only (the node's used GPUs summed; no node-level source measured)"
NODE = "node (a node-scope source: {api})"


def power_samples(sampler, t0: float, t1: float) -> list[tuple[float, float]]:
    """(time, W summed over the sources) of each sample in [t0, t1] where every source read power."""
    out = []
    for t, row in zip(sampler.times, sampler.readings):
        if t0 <= t <= t1 and row and all(r is not None and r.power_w is not None for r in row):
            out.append((t, sum(r.power_w for r in row)))
    return out


def bracketing(samples: list[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float]]:
    """The samples inside [t0, t1] plus the last one before and the first one
    after, so the readings' span covers the whole window."""
    before = [s for s in samples if s[0] < t0]
    after = [s for s in samples if s[0] > t1]
    inside = [s for s in samples if t0 <= s[0] <= t1]
    return before[-1:] + inside + after[:1]


def node_samples(node) -> tuple[list[tuple[float, float]], str] | None:
    """(wall time, W) of the first node-scope channel that read power, and its API;
    None where no node-level source measured (node: the NodePowerSampler)."""
    for run in getattr(node, "runs", None) or []:
        for channel in run.source.channels:
            if channel.scope != "node":
                continue
            points = [(node.wall(s.t), s.power_w.get(channel.name)) for s in run.samples]
            points = [(t, w) for t, w in points if w is not None]
            if len(points) >= 2:
                return points, run.source.api
    return None


def node_counts(ranks: list[dict] | None) -> dict[int, int]:
    """Epoch index -> units of every rank of this node in that epoch."""
    counts: dict[int, int] = {}
    for rank in ranks or []:
        for e in rank.get("epochs") or []:
            counts[e["index"]] = counts.get(e["index"], 0) + int(e["units"])
    return counts


def power_path(log_path: Path, node_index: int = 0) -> Path:
    return Path(log_path).parent / POWER_DIR / Path(log_path).stem / f"node_{node_index}.txt"


def write(path: Path, doc: dict, samples: list[tuple[float, float]],
          boundary: str = GPU_ONLY, counts: dict[int, int] | None = None,
          node_index: int = 0) -> str | None:
    """Write doc (a result document) as an MLPerf log at path, and its power
    file (MLPerf Power's layout) where samples are given; None when written,
    else why not. samples: (wall time, W) of the node or its GPUs (boundary says
    which), any span: those bracketing the measured window are kept."""
    try:
        from mlperf_logging.mllog import constants as C
        from mlperf_logging.mllog.mllog import MLLogger
    except ImportError:
        return MISSING
    stamps = doc.get("timestamps") or {}
    t0, t1 = stamps.get("measured_start"), stamps.get("measured_end")
    readings = bracketing(samples, t0, t1) if samples and t0 is not None else []
    # Root may run this in a folder others could have planted links in: every file
    # is made through safe_files (O_NOFOLLOW|O_EXCL, renamed into place), and the
    # library only writes to the stream it is handed, never opens a path itself.
    with Folder.open(Path(path).parent) as folder:
        with _mllogger(folder, Path(path).name, MLLogger) as ml:
            _events(ml, C, doc, counts or {}, boundary if readings else None)
        _write_power(folder, Path(path).stem, node_index, C, doc, readings, boundary, MLLogger)
    return None


def _write_power(folder, stem: str, node_index: int, C, doc: dict, readings, boundary, factory) -> None:
    """power/<stem>/node_<k>.txt inside folder (a stale one of an earlier write removed)."""
    name = f"node_{node_index}.txt"
    if len(readings) < 2:
        _remove_power(folder, stem, name)
        return
    with folder.folder(POWER_DIR) as power, power.folder(stem) as log:
        with _mllogger(log, name, factory) as ml:
            _power_events(ml, C, doc, readings, boundary)


def _remove_power(folder, stem: str, name: str) -> None:
    """power/<stem>/<name> removed if there, nothing below folder followed."""
    with contextlib.suppress(OSError):
        with Folder(os.open(POWER_DIR, _DIR_FLAGS, dir_fd=folder.fd), folder.path / POWER_DIR) as power, \
                Folder(os.open(stem, _DIR_FLAGS, dir_fd=power.fd), power.path / stem) as log:
            os.unlink(name, dir_fd=log.fd)


def remove(log_path: Path, node_index: int = 0) -> None:
    """The log and its power file removed (a failed write leaves neither), no link followed."""
    with contextlib.suppress(OSError), Folder.open(Path(log_path).parent) as folder:
        _remove_power(folder, Path(log_path).stem, f"node_{node_index}.txt")
        os.unlink(Path(log_path).name, dir_fd=folder.fd)


class _KeepingHandler(logging.StreamHandler):
    """A StreamHandler that keeps its first write error for the caller: logging's own
    handleError prints "--- Logging error ---" and a traceback to stderr (a full disk
    mid-log), which the launcher would echo as if the workload had crashed."""

    def __init__(self, stream):
        super().__init__(stream)
        self.error: BaseException | None = None

    def handleError(self, record) -> None:
        if self.error is None:
            self.error = sys.exc_info()[1]


class _mllogger:
    """An MLLogger on a private logger writing one file of folder (a safe_files.Folder):
    the library gets a stream, the file is made no-follow and renamed in on success."""

    def __init__(self, folder, name: str, factory):
        self.folder, self.name, self.factory = folder, name, factory

    def __enter__(self):
        self.replacing = self.folder.replacing_text(self.name)
        stream = self.replacing.__enter__()
        self.logger = logging.getLogger(f"hpcai.mllog.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.INFO)
        self.handler = _KeepingHandler(stream)
        self.logger.addHandler(self.handler)
        return self.factory(logger=self.logger)

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        try:
            self.handler.flush()
            if self.handler.error is not None and exc[0] is None:
                raise self.handler.error
        except BaseException as failed:  # a full disk: the temporary file goes too
            self.replacing.__exit__(type(failed), failed, failed.__traceback__)
            raise
        return bool(self.replacing.__exit__(*exc))


def _ms(t: float) -> int:
    return int(round(t * 1000))


def _host(doc: dict) -> str:
    return (doc.get("host") or {}).get("node") or "node_0"


def _power_events(ml, C, doc: dict, readings, boundary: str) -> None:
    host = _host(doc)
    ml.start(C.POWER_MEASUREMENT_START, time_ms=_ms(readings[0][0]),
             metadata={"host": host, "boundary": boundary})
    for t, watts in readings:
        ml.event(C.POWER_READING, watts, time_ms=_ms(t), metadata={"host": host, "unit": "W"})
    ml.end(C.POWER_MEASUREMENT_STOP, time_ms=_ms(readings[-1][0]), metadata={"host": host})


def _status(C, doc: dict) -> str:
    """success only for a complete run whose validity did not fail."""
    verdict = (doc.get("validity") or {}).get("verdict")
    return C.SUCCESS if doc.get("status") == "complete" and verdict != "fail" else C.ABORTED


def _events(ml, C, doc: dict, counts: dict[int, int], boundary: str | None) -> None:
    epochs = doc.get("epochs") or []
    config, tp, power = doc.get("config") or {}, doc.get("throughput") or {}, doc.get("power") or {}
    stamps = doc.get("timestamps") or {}
    first = _ms(epochs[0]["start"]) if epochs else None
    # The timed span is the measured window; without one, the epochs' span.
    begin = _ms(stamps["measured_start"]) if stamps.get("measured_start") is not None else first
    end = _ms(stamps["measured_end"]) if stamps.get("measured_end") is not None else (
        _ms(epochs[-1]["end"]) if epochs else None)
    ml.event(C.SUBMISSION_BENCHMARK, doc["workload"], time_ms=first)
    ml.event(C.SUBMISSION_ORG, "hpcai", time_ms=first)
    gpus = [g["name"] for g in doc.get("gpus") or [] if g.get("used")]
    ml.event(C.SUBMISSION_PLATFORM, f"{len(gpus)}x{gpus[0]}" if gpus else (doc.get("host") or {}).get("cpu_model"),
             time_ms=first)
    if config.get("global_batch_size"):
        ml.event(C.GLOBAL_BATCH_SIZE, config["global_batch_size"], time_ms=first)
    ml.event(C.EPOCH_COUNT, len(epochs), time_ms=first)
    warmups = [e for e in epochs if e["warmup"]]
    if warmups:  # untimed: between init_start and init_stop, before run_start
        ml.start(C.INIT_START, time_ms=_ms(warmups[0]["start"]))
        for e in warmups:
            _epoch(ml, C, e, counts)
        ml.end(C.INIT_STOP, time_ms=begin)
    ml.start(C.RUN_START, time_ms=begin, metadata={"run_id": doc["run_id"]})
    for e in epochs:
        if not e["warmup"]:
            _epoch(ml, C, e, counts)
    # hpcai's own figures, under their own keys: MLPerf Training has no throughput key.
    ml.event("throughput", tp.get("node"), time_ms=end,
             metadata={"unit": tp.get("unit"), "basis": "node", "per_gpu": tp.get("per_gpu"),
                       "devices_node": tp.get("devices_node")})
    if power.get("energy_j") is not None:
        ml.event("energy", power["energy_j"], time_ms=end,
                 metadata={"unit": "J", "window_s": power.get("window_s"),
                           "units_per_joule": power.get("units_per_joule"),
                           "boundary": "GPU boards (hpcai's energy_j)"})
    if boundary is not None:
        ml.event("power_boundary", boundary, time_ms=end)
    ml.end(C.RUN_STOP, time_ms=end, metadata={C.STATUS: _status(C, doc),
                                              "hpcai_status": doc.get("status"),
                                              "validity": (doc.get("validity") or {}).get("verdict")})


PREFIX = ":::MLLOG "


def restamp_status(path: Path, doc: dict) -> bool:
    """Rewrite run_stop's status from doc's final validity (the launcher's
    verdict comes after the workload wrote the log); True if rewritten. A
    symlink or a line that is not an MLPerf event is left alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    status = "success" if doc.get("status") == "complete" and \
        (doc.get("validity") or {}).get("verdict") != "fail" else "aborted"
    changed = False
    for k, line in enumerate(lines):
        if not line.startswith(PREFIX):
            continue
        try:
            event = json.loads(line[len(PREFIX):])
        except ValueError:
            continue
        if event.get("key") == "run_stop" and isinstance(event.get("metadata"), dict):
            event["metadata"].update({"status": status, "hpcai_status": doc.get("status"),
                                      "validity": (doc.get("validity") or {}).get("verdict")})
            lines[k] = PREFIX + json.dumps(event)
            changed = True
    if changed:  # through safe_files: never through a planted file or link
        with Folder.open(Path(path).parent) as folder:
            folder.write_text(Path(path).name, "\n".join(lines) + "\n")
    return changed


def _epoch(ml, C, e: dict, counts: dict[int, int]) -> None:
    meta = {C.EPOCH_NUM: e["index"] + 1, "warmup": e["warmup"]}
    ml.start(C.EPOCH_START, time_ms=_ms(e["start"]), metadata=meta)
    ml.end(C.EPOCH_STOP, time_ms=_ms(e["end"]),
           metadata={**meta, "samples_count": counts.get(e["index"], e["units"]),
                     "duration_s": e["duration_s"]})
