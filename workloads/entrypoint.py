"""The measurement entrypoint: one run spec in, one result (and a telemetry
sidecar) out. The same code runs on the host and inside the images; under
torchrun it runs once per process and local rank 0 writes the node's result.
"""
from __future__ import annotations

import importlib
import json
import platform
import sys
import time
import traceback
from pathlib import Path

from hpcai.timestamps import now_iso
from hpcai import provenance, result_document
from hpcai.errors import HpcaiError, Interrupted
from hpcai.signals import deferred_signals, install_signal_handlers
from hpcai.spec import RunSpec
from hpcai.measure import validity
from hpcai.workloads import catalog, distributed, lifeline
from hpcai.workloads import result as R
from hpcai.workloads.base import EngineWorkload
from hpcai.workloads.flops import fraction_of_peak
from hpcai.workloads.protocol import Progress, run_epochs
from hpcai.workloads.versions import framework_versions

SAMPLES_FILE = "samples.csv"
RESULT_FILE = "result.json"


def log(message: str) -> None:
    try:
        print(f"[hpcai] {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # a full disk under the log must not stop the result being written


def _absorb_further_signals(signum: int) -> None:
    """The first signal stops the run; the next ones (torchrun forwarding one the
    rank also got itself, the lifeline's, Slurm's) must not cut short the
    writing of the interrupted result. Handlers come back when the run ends."""
    import signal

    from hpcai.signals import SIGNALS

    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, lambda s, f: None)


def _rank_records(ranks: list[dict], throughput: dict) -> list[dict]:
    return [{"rank": r["rank"], "device": r.get("device"), "throughput": t,
             "peak_memory": r.get("peak_memory")} for r, t in zip(ranks, throughput["per_rank"])]


class Run:
    """spec: a RunSpec (the entrypoint's, checked), or its JSON (tests build parts
    of one); workloads and the result read the JSON."""

    def __init__(self, spec: RunSpec | dict, out_dir: Path):
        self.spec = spec.to_json() if isinstance(spec, RunSpec) else spec
        self.out_dir = Path(out_dir)
        self.workload_def = catalog.get_workload(self.spec["workload"])
        self.impl = self.workload_def.impl(self.spec.get("impl"))
        self.started = now_iso()
        self.progress = Progress()
        self.status, self.error = "running", None
        self.ctx = self.discovery = self.sampler = self.workload = None
        self.sampler_written = True
        self.watcher = None
        self.node_power = None  # NodePowerSampler: the site's node sources, own threads
        # In-run sweeps (spec "inrun"): the process writes process.json; each segment
        # its own result, through the launcher (workloads/inrun.py, control.py).
        self.in_run = bool(self.spec.get("inrun"))
        self.result_file = "process.json" if self.in_run else RESULT_FILE
        self.segment: dict | None = None  # the segment being measured
        self.measurement: dict | None = None  # settle and adaptive window record
        self.signalled: int | None = None  # the first signal this run received

    # ---- the run --------------------------------------------------------
    def execute(self) -> int:
        with install_signal_handlers(self._on_signal):
            # Before anything slow: a workload must not outlive its launcher.
            watcher = self.watcher = lifeline.watch(log)
            try:
                self._setup()
                self._measure()
                self.status = "complete"
            except (Interrupted, KeyboardInterrupt) as exc:
                self._mark_interrupted(exc)
            except HpcaiError as exc:
                self.status, self.error = "failed", {"type": type(exc).__name__,
                                                     "message": exc.one_line()}
                log(f"error: {exc.one_line()}")
            except Exception as exc:  # recorded in the result, traceback in the log
                if self.signalled is not None:
                    # The signal landed inside a library that wrapped it (torch.compile's
                    # InductorError, a DataLoader's worker error): still an interruption.
                    self._mark_interrupted(exc)
                else:
                    self._mark_failed(exc)
            self._after_run(watcher)
        return {"complete": 0, "interrupted": 130}.get(self.status, 1)

    def _after_run(self, watcher) -> None:
        """Stop the samplers, close an open segment, write the result."""
        # The run is over; more signals (under Slurm every process gets one,
        # then srun forwards another) must not stop the result being written.
        with deferred_signals():
            if self.sampler is not None:
                self.sampler.stop()
            if self.node_power is not None:
                self.node_power.stop()
            if self.segment is not None:  # a segment cut short: never complete
                try:
                    self._close_segment(None, self.status if self.status != "complete"
                                        else "failed", self.error)
                except Exception as exc:
                    log(f"cannot write the open segment's result: {exc}")
            self._finish()
        if watcher is not None:
            watcher.stop()

    def _on_signal(self, signum: int) -> None:
        """The first signal is remembered (a library may wrap the exception it raises)
        and every later one absorbed."""
        if self.signalled is None:
            self.signalled = signum
        _absorb_further_signals(signum)

    def _mark_failed(self, exc: Exception) -> None:
        self.status = "failed"
        self.error = {"type": type(exc).__name__, "message": str(exc)}
        log(f"error: {type(exc).__name__}: {' '.join(str(exc).split())}")
        try:
            traceback.print_exc()
        except (OSError, ValueError):
            pass

    def _mark_interrupted(self, exc: BaseException) -> None:
        self.status = "interrupted"
        if isinstance(exc, (Interrupted, KeyboardInterrupt)):
            message = str(exc) or "interrupted by SIGINT"
        else:
            message = f"interrupted by signal {self.signalled} (inside {type(exc).__name__})"
        if self.watcher is not None and self.watcher.reason:
            message = f"{message}: {self.watcher.reason}"
        self.error = {"type": "Interrupted", "message": message}
        log(f"{self.error['message']}: writing a result marked interrupted")

    def _setup(self) -> None:
        device = self.spec["devices"].get("type", "auto")
        if self.impl.process_model == "torchrun":
            self.ctx = distributed.init(device)
        else:
            self.ctx = distributed.single(device)
        protocol = self.spec["protocol"]
        if self.ctx.is_node_leader:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if protocol.get("telemetry", True):
                from hpcai.measure.power_sources import discover
                from hpcai.measure.telemetry import Sampler

                self.discovery = discover(self.spec["devices"].get("vendor", "auto"))
                self.discovery.restrict(self.spec["devices"])
                sources = self.discovery.gpus or self.discovery.rapl
                self.sampler = Sampler(sources, float(protocol["sample_interval_s"]))
                if (self.spec.get("node_power") or {}).get("sources"):
                    from hpcai.measure.node_power import NodePowerSampler

                    self.node_power = NodePowerSampler(self.spec["node_power"])
                    # One clock: the GPU sampler's wall-anchored monotonic time.
                    self.node_power._wall0 = self.sampler._wall0
                    self.node_power._mono0 = self.sampler._mono0
            self._write(self._document())  # status "running" until we know better
        module = importlib.import_module(self.impl.module_path)
        self.workload = module.build(self.spec, self.ctx)

    def _measure(self) -> None:
        if self.sampler is not None:
            self.sampler.start()
        if self.node_power is not None:
            self.node_power.start()
        on_epoch = self._report_epoch if self.ctx.rank == 0 else None
        warmup = int(self.spec["protocol"].get("warmup_epochs") or 0)
        if on_epoch is not None and warmup:  # its first line comes only when an epoch ends
            log(f"warm-up: {warmup} epoch(s) before anything is measured (the first steps compile "
                "and fill caches: on a GPU this can take minutes); each epoch's line follows when it ends")
        if self.in_run:
            self._measure_in_run(on_epoch)
        elif self.spec["protocol"].get("ci_target") is not None and \
                getattr(self.workload, "runs_programs", True):
            measurer = self._measurer(on_epoch)
            program = self._adaptive_program(measurer)
            if isinstance(self.workload, EngineWorkload):
                self.workload.run(self.spec["protocol"], self.progress, on_epoch, program=program)
            else:
                measurer.drive(program)
        elif isinstance(self.workload, EngineWorkload):
            self.workload.run(self.spec["protocol"], self.progress, on_epoch)
        else:
            run_epochs(self.workload, self.spec["protocol"], self.ctx, self.sampler, on_epoch,
                       self.progress)

    # ---- in-run measurement (workloads/inrun.py) ---------------------------
    def _measurer(self, on_epoch):
        from hpcai.workloads.inrun import Measurer

        counted = None
        if self.discovery is not None and self.discovery.kind == "gpu":
            used = self.spec["devices"].get("gpu_indices")
            counted = [i for i, g in enumerate(self.discovery.gpus)
                       if used is None or g.info().index in used]
        self.measurer = Measurer(self.workload, self.spec["protocol"], self.ctx, self.sampler,
                                 self.progress, on_epoch, counted)
        return self.measurer

    def _adaptive_program(self, measurer):
        """A single run with --ci-target: warm-up, settle, adaptive window."""
        yield from measurer.warm_up()
        settle = yield from measurer.settle()
        window = yield from measurer.measure()
        self.measurement = {"settle": settle, "window": window}

    def _measure_in_run(self, on_epoch) -> None:
        measurer = self._measurer(on_epoch)
        if self.impl.in_run == "windows":  # exec --api: the program's windows are the segments
            from hpcai.workloads.control import Channel
            from hpcai.workloads.window_segments import Gate

            inrun = self.spec["inrun"]
            gate = Gate(self, Channel(Path(self.spec["output_dir"]) / inrun["channel"]),
                        int(inrun["segments"]))
            self.workload.run(self.spec["protocol"], self.progress, on_epoch, program=gate)
            return
        program = self._in_run_program(measurer)
        if isinstance(self.workload, EngineWorkload):
            from hpcai.errors import WorkloadError

            if self.impl.in_run is None:
                raise WorkloadError(f"{self.spec['workload']} cannot measure in-run",
                                    "run the sweep with --no-in-run (one run per cap)")
            self.workload.run(self.spec["protocol"], self.progress, on_epoch, program=program)
        else:
            measurer.drive(program)

    def _in_run_program(self, measurer):
        """Warm up once; then per segment: ask this node's launcher for its cap,
        settle, measure, write the segment's result for the launcher to check."""
        import copy

        from hpcai.errors import WorkloadError
        from hpcai.workloads.control import Channel
        from hpcai.workloads.inrun import rank0

        # Serving: warm up as a single run does, then each window is one load wave.
        waves = self.impl.in_run == "waves"
        yield from measurer.warm_up(getattr(self.workload, "warmup_requests", None) if waves
                                    else None)
        channel = Channel(Path(self.spec["output_dir"]) / self.spec["inrun"]["channel"])
        segment = 0
        while True:
            mine = channel.ask(segment) if self.ctx.is_node_leader else None
            first = rank0(self.ctx, mine)
            # Rank 0's answer leads; this node's own launcher may have failed (Slurm).
            failed = next((a for a in (first, mine) if a and a.get("error")), None)
            if failed:
                raise WorkloadError(f"the launcher could not start segment {segment}: "
                                    f"{failed['error']}", "see the launcher's output")
            if first.get("done"):
                return
            answer = mine or first
            spec = copy.deepcopy(self.spec)
            spec.pop("inrun", None)
            spec.update(answer["spec"])
            if self.ctx.rank == 0:
                log(f"segment {segment + 1}: cap {answer['cap_w']:g} W (enforced "
                    f"{answer.get('enforced_w')}), results in {spec['output_dir']}")
            measurer.segment = segment + 1  # the epoch lines say which segment
            self.segment = {"index": segment, "spec": spec, "first_epoch": len(self.progress.epochs),
                            "started": now_iso(), "t0": time.time(), "answer": answer}
            if waves:  # the wave's client files go into the segment's folder
                self.workload.wave_dir = Path(spec["output_dir"])
            settle = yield from measurer.settle()
            window = yield from (measurer.one_wave() if waves else measurer.measure())
            self._close_segment({"settle": settle, "window": window}, "complete", None)
            segment += 1

    def _close_segment(self, measurement: dict | None, status: str, error: dict | None) -> None:
        """The open segment's result, as `segment.json` in its folder (the launcher
        checks it and turns it into result.json); every rank takes part when complete."""
        seg, self.segment = self.segment, None
        mine = self._rank_summary()
        mine["epochs"] = mine["epochs"][seg["first_epoch"]:]
        ranks = [mine]
        if status == "complete" and self.ctx.distributed:
            ranks = [r for r in distributed.gather(self.ctx, mine)
                     if r["node_rank"] == self.ctx.node_rank]
        if not self.ctx.is_node_leader:
            return
        folder = Path(seg["spec"]["output_dir"])
        doc = self._document(ranks, spec=seg["spec"], status=status, error=error,
                             started=seg["started"], first_epoch=seg["first_epoch"])
        answer = seg["answer"]
        doc["segment"] = {"index": seg["index"], "in_run": True,
                          "process_run_id": self.spec["run_id"],
                          "after_segment": seg["index"] - 1 if seg["index"] else None,
                          "cap_w": answer["cap_w"], "enforced_w": answer.get("enforced_w")}
        doc["measurement"] = measurement
        if self.sampler is not None:
            names = ([f"gpu{g.info().index}" for g in self.discovery.gpus]
                     or [d.name for d in self.discovery.rapl])
            try:
                self.sampler.write_csv(folder / SAMPLES_FILE, names, seg["t0"], time.time())
                doc["sidecar"]["samples"] = SAMPLES_FILE
            except OSError as exc:
                log(f"cannot write {folder / SAMPLES_FILE}: {exc}")
                doc["sidecar"]["samples"] = None
        if status == "complete":
            doc["sidecar"].update(self._write_mllog(doc, folder, ranks))
        result_document.write(folder / "segment.json", doc)

    def _report_epoch(self, epoch, total: int) -> None:
        from hpcai.workloads import heartbeat

        heartbeat.beat()  # engines that drive their own steps beat here, once an epoch
        kind = "warm-up" if epoch.warmup else "measured"
        # Sweeps and adaptive windows have no fixed total: say where the measurement is.
        measurer = getattr(self, "measurer", None)
        status = measurer.status() if measurer is not None else None
        head = f"epoch {epoch.index + 1} ({status})" if status else f"epoch {epoch.index + 1}/{total} ({kind})"
        line = f"{head}: {epoch.throughput:.1f} {self._unit()}/s per process"
        power = self._epoch_power(epoch)
        if power is not None:  # the sources' sum (every GPU measured on this node), not per process
            line += f", power {power:.0f} W on this node's measured GPUs"
        if epoch.loss is not None:
            line += f", loss {epoch.loss:.3f}"
        log(line)

    def _epoch_power(self, epoch) -> float | None:
        if self.sampler is None:
            return None
        total, seen = 0.0, False
        for i in range(len(self.sampler.sources)):
            values = [r.power_w for _, r in self.sampler.series(i, epoch.start, epoch.end)
                      if r.power_w is not None]
            if values:
                total += sum(values) / len(values)
                seen = True
        return total if seen else None

    # ---- the result -----------------------------------------------------
    def _rank_summary(self) -> dict:
        ctx = self.ctx
        summary = {"rank": ctx.rank if ctx else 0, "hostname": ctx.hostname if ctx else None,
                   "epochs": [e.to_dict() for e in self.progress.epochs],
                   "first_loss": self.progress.first_loss}
        if ctx is not None:
            summary["device"] = distributed.device_name(ctx, self.discovery)
            summary["local_rank"] = ctx.local_rank
            summary["node_rank"] = ctx.node_rank
        if self.workload is not None:
            summary["peak_memory"] = self.workload.peak_memory()
        return summary

    def _finish(self) -> None:
        mine = self._rank_summary()
        ranks = [mine]
        if self.status == "complete" and self.ctx is not None and self.ctx.distributed:
            ranks = distributed.gather(self.ctx, mine)
            # This node's ranks only (two "nodes" may share a hostname, as in CI).
            ranks = [r for r in ranks if r["node_rank"] == self.ctx.node_rank]
        if self.ctx is None or self.ctx.is_node_leader:
            self._check_launcher()
            if self.sampler is not None:
                names = ([f"gpu{g.info().index}" for g in self.discovery.gpus]
                         or [d.name for d in self.discovery.rapl])
                try:
                    self.sampler.write_csv(self.out_dir / SAMPLES_FILE, names)
                except OSError as exc:
                    self._disk_failed(exc, SAMPLES_FILE)
                    (self.out_dir / SAMPLES_FILE).unlink(missing_ok=True)
            try:
                doc = self._document(ranks)
                doc["sidecar"].update(self._write_mllog(doc, ranks=ranks))
                self._write(doc)
            except OSError as exc:
                log(f"error: cannot write {self.out_dir / RESULT_FILE} "
                    f"([Errno {exc.errno}] {exc.strerror}): the result is missing or stale")
        if self.discovery is not None:
            self.discovery.close()
        if self.ctx is not None:
            distributed.shutdown(self.ctx)

    def _check_launcher(self) -> None:
        """A measurement that ends after its launcher died gets no cap check and may
        have run on restored limits: it is not `complete`, whatever it measured."""
        if self.status != "complete" or self.watcher is None:
            return
        try:
            gone = self.watcher.launcher_gone()
        except OSError:
            return
        if gone:
            self.status = "interrupted"
            self.error = {"type": "LauncherGone",
                          "message": "the launcher is gone (killed?) before it could check the "
                                     "cap: the figures are not a result"}
            log(self.error["message"])

    def _disk_failed(self, exc: OSError, what: str) -> None:
        """A full or read-only disk: the run failed, said in one line."""
        message = f"cannot write {what} in {self.out_dir} ([Errno {exc.errno}] {exc.strerror})"
        log(f"error: {message}")
        self.status, self.error = "failed", {"type": "OutputError", "message": message}
        self.sampler_written = False

    def _write_mllog(self, doc: dict, folder: Path | None = None,
                     ranks: list[dict] | None = None) -> dict:
        """The MLPerf-format log and its power file, after the run (workloads/mlperf_log.py)."""
        from hpcai.measure import serving_phases
        from hpcai.workloads import mlperf_log

        folder = self.out_dir if folder is None else folder
        if self.in_run and folder == self.out_dir:
            # The process spans every segment's cap: one log per segment instead.
            return {"mllog": None, "mllog_reason": "an in-run process: each segment has its own log"}
        samples, boundary = [], mlperf_log.GPU_ONLY
        measured = mlperf_log.node_samples(self.node_power) if self.node_power is not None else None
        if measured is not None:
            samples, api = measured
            boundary = mlperf_log.NODE.format(api=api)
        elif self.sampler is not None and doc["timestamps"].get("measured_start") is not None:
            used = serving_phases.used_sources(doc["spec"], self.discovery)
            samples = [(t, sum(row[i].power_w for i in used))
                       for t, row in zip(self.sampler.times, self.sampler.readings)
                       if used and all(row[i] is not None and row[i].power_w is not None
                                       for i in used)]
        # Each node writes its own run folder (Slurm: node-<rank>/): within it, MLPerf
        # Power's checker wants node_0..node_{n-1}, so this node is node_0 (its host
        # name is in every reading's metadata).
        node_index = 0
        try:
            reason = mlperf_log.write(folder / mlperf_log.MLLOG_FILE, doc, samples, boundary,
                                      mlperf_log.node_counts(ranks), node_index)
        except Exception as exc:  # a side file: the result is still written
            reason = f"{type(exc).__name__}: {exc}"
            # No half-written log beside the result (a full disk, say).
            mlperf_log.remove(folder / mlperf_log.MLLOG_FILE, node_index)
        if reason:
            log(f"no {mlperf_log.MLLOG_FILE}: {reason}")
        return {"mllog": None if reason else mlperf_log.MLLOG_FILE, "mllog_reason": reason}

    def _write(self, doc: dict) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        result_document.write(self.out_dir / self.result_file, doc)

    def _input_section(self, ranks: list[dict], seconds: float | None) -> dict:
        """`input`: the runtime split, where the data came from storage."""
        from hpcai.workloads.runtime_split import input_section

        section = input_section(ranks, _input_of(self.workload), seconds)
        return {"input": section} if section is not None else {}

    def _document(self, ranks: list[dict] | None = None, spec: dict | None = None,
                  status: str | None = None, error: dict | None = None,
                  started: str | None = None, first_epoch: int | None = None) -> dict:
        """The result document. spec, status, error, started, first_epoch: a
        segment's, where not the run's."""
        spec = self.spec if spec is None else spec
        if status is None:
            status, error = self.status, self.error
        ranks = ranks or [self._rank_summary()]
        leader = ranks[0]
        epochs = leader["epochs"]
        throughput = R.node_throughput(ranks)
        window = R.measured_window(epochs)
        units = throughput["measured_units"]
        gpus, packages, power = R.power_section(spec, self.discovery, self.sampler, window, units,
                                               node=self.node_power)
        config = self._config()
        doc = result_document.skeleton(spec, started or self.started, self._unit())
        doc.update({
            "status": status,
            "error": error,
            "timestamps": self._timestamps(status, started, window),
            "software": self._software(doc["software"]),
            "config": config,
            "protocol": self._protocol_record(spec, epochs),
            "epochs": epochs,
            "ranks": _rank_records(ranks, throughput),
            "throughput": self._throughput_record(throughput, config, len(ranks)),
            "work": self._work_record(leader, units, throughput),
            "gpus": gpus,
            "cpu_packages": packages,
            "power": power,
            "memory": _peak_memory(ranks),
            "workload_metrics": self._metrics_with_phases(spec, first_epoch),
            **self._input_section(ranks, throughput["measured_seconds"]),
            "sidecar": {"samples": SAMPLES_FILE if self.sampler and status != "running"
                        and self.sampler_written else None},
        })
        if self.measurement is not None and spec is self.spec:
            doc["measurement"] = self.measurement
        # A workload that adds figures made of the document's own (exec: energy to solution).
        finish = getattr(self.workload, "finish_document", None)
        if finish is not None:
            finish(doc)
        paper_power = self._paper_accounting(spec, epochs, throughput, power)
        if paper_power is not None:
            doc["power"]["paper_accounting"] = paper_power
        # Check by check, from the document alone; the launcher evaluates it again
        # once its own block (enforced limits, idle baseline) is in.
        doc["validity"] = validity.evaluate(doc, "workload")
        return doc

    def _timestamps(self, status: str, started: str | None, window) -> dict:
        return {"started": started or self.started,
                "finished": None if status == "running" else now_iso(),
                "measured_start": window[0] if window else None,
                "measured_end": window[1] if window else None}

    def _work_record(self, leader: dict, units, throughput: dict) -> dict:
        epochs = leader["epochs"]
        return {"unit": self._unit(), "measured_units": units,
                "measured_seconds": throughput["measured_seconds"],
                "first_loss": leader.get("first_loss"),
                "last_loss": epochs[-1]["loss"] if epochs else None}

    def _unit(self) -> str:
        """The unit of work: the workload's declared one, unless the run names its own (exec --units)."""
        return getattr(self.workload, "run_unit", None) or self.workload_def.unit
    def _paper_accounting(self, spec: dict, epochs: list[dict], throughput: dict,
                          power: dict) -> dict | None:
        """For a `paper`-preset run: power, energy and efficiency the way the upstream
        scripts compute them (hpcai/measure/paper_accounting.py), beside ours."""
        from hpcai.measure import paper_accounting, serving_phases

        if (spec.get("comparability") or {}).get("preset_kind") != "paper":
            return None
        method = paper_accounting.method_for(spec["workload"])
        if method is None or self.discovery is None or self.discovery.kind != "gpu":
            return None
        sources = serving_phases.used_sources(spec, self.discovery)
        return paper_accounting.account(
            method, self.sampler, sources, epochs, throughput["per_epoch_node"],
            power.get("window_s"), len(sources), float(power.get("node_overhead_w") or 0.0))

    def _config(self) -> dict:
        """The workload's own description, with how this process ran it."""
        config = self.workload.describe() if self.workload is not None else {}
        ctx = self.ctx
        if ctx is not None:
            # Per node: throughput per GPU divides by this node's processes.
            config.update({"device_type": ctx.device_type, "processes": ctx.local_world_size,
                           "nodes": ctx.nodes, "world_size": ctx.world_size,
                           "backend": ctx.backend, "threads_per_process": ctx.threads})
        return config

    def _software(self, software: dict) -> dict:
        """hpcai's versions (the skeleton's) with the framework's and the GPU library's."""
        if self.ctx is not None:
            software.update(framework_versions(self.ctx, self.impl.framework))
        if self.discovery is not None and self.discovery.library is not None:
            software["gpu_library"] = self.discovery.library.versions()
        return software

    def _protocol_record(self, spec: dict, epochs: list[dict]) -> dict:
        """The protocol as run: the spec's settings, the sampler's achieved rate."""
        sampler = self.sampler
        return {
            **result_document.protocol_settings(spec),
            "sample_interval_achieved_s": sampler.achieved_intervals() if sampler else None,
            "samples": len(sampler.times) if sampler else 0,
            "sampler_overhead": sampler.overhead() if sampler else None,
            "epochs_completed": len(epochs),
            "measured_epochs_completed": sum(1 for e in epochs if not e["warmup"]),
        }

    def _throughput_record(self, throughput: dict, config: dict, processes: int) -> dict:
        """Node and per-GPU throughput, and the share of peak FLOPs where known."""
        flops = config.get("flops_per_unit")
        achieved = throughput["node"] * flops / 1e12 if flops and throughput["node"] else None
        peak = config.get("peak_tflops") or {}
        # One process may drive several GPUs (MirroredStrategy): per GPU means per device.
        per_gpu = throughput["per_gpu"]
        devices_per_process = int(config.get("devices_per_process") or 1)
        if per_gpu is not None:
            per_gpu /= devices_per_process
        return {
            "unit": f"{self._unit()}/s",
            "node": throughput["node"],
            "per_gpu": per_gpu,
            # What the node figure covers: per GPU = node / this many.
            "devices_node": processes * devices_per_process,
            "per_epoch_node": throughput["per_epoch_node"],
            "stats_node": throughput["stats_node"],
            "achieved_tflops_node": achieved,
            "peak_tflops_node": peak.get("tflops_node"),
            "fraction_of_peak": fraction_of_peak(achieved, peak),
        }

    def _metrics_with_phases(self, spec: dict, first_epoch: int | None) -> dict | None:
        metrics = self._workload_metrics(first_epoch)
        phases = getattr(self.workload, "phases", lambda: None)() if self.workload is not None else None
        if phases and metrics is not None:
            # Serving: ramp-up, steady state and ramp-down, each with its own energy.
            metrics["phase_energy"] = R.phase_energy(spec, self.discovery, self.sampler, phases)
        served = getattr(self.workload, "serving_requests", lambda: None)() \
            if self.workload is not None else None
        if served and metrics is not None:
            # Serving: prefill and decode, each with its time, energy and J per token.
            from hpcai.measure import serving_phases
            metrics["serving_phases"] = serving_phases.split(
                self.sampler, serving_phases.used_sources(spec, self.discovery),
                served["requests"], served["input_tokens"], served["output_tokens"])
        return metrics

    def _workload_metrics(self, first_epoch: int | None) -> dict | None:
        """The workload's own figures; an in-run segment's from its first epoch on,
        where the workload keeps them per step (LitGPT)."""
        if self.workload is None:
            return None
        scoped = getattr(self.workload, "segment_metrics", None)
        if first_epoch is not None and scoped is not None:
            return scoped(first_epoch)
        return self.workload.metrics()


def _peak_memory(ranks: list[dict]) -> dict | None:
    """The largest peak over this node's ranks."""
    peaks = [r.get("peak_memory") for r in ranks if r.get("peak_memory")]
    return {"peak_bytes": max(p["bytes"] for p in peaks), "kind": peaks[0]["kind"]} if peaks else None


def _input_of(workload) -> dict | None:
    describe = getattr(workload, "input_description", None)
    return describe() if describe is not None else None


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hpcai.workloads",
        description="hpcai measurement entrypoint: run one spec, write one result.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a run spec (JSON) and write result.json")
    run.add_argument("--spec", required=True, help="path to the run spec JSON")
    run.add_argument("--output", help="result folder (default: the spec's output_dir)")
    sub.add_parser("version", help="print versions and exit")
    check = sub.add_parser("check", help="import an image family's frameworks and print their versions")
    check.add_argument("--family", required=True, help=f"one of: {', '.join(catalog.IMAGE_FAMILIES)}")
    check.add_argument("--workloads", help="comma list (default: every workload of the family)")
    args = parser.parse_args(argv)
    if args.command == "version":
        print(json.dumps({**provenance.hpcai_versions(), "platform": platform.platform()}))
        return 0
    if args.command == "check":
        from hpcai.workloads import selfcheck

        return selfcheck.run(args.family, [w for w in (args.workloads or "").split(",") if w])
    try:
        spec = RunSpec.from_json(json.loads(Path(args.spec).read_text()),
                                 need_output=args.output is None)
        run = Run(spec, Path(args.output or spec.output_dir))
    except (OSError, ValueError) as exc:
        print(f"hpcai: error: cannot read run spec {args.spec}: {exc}", file=sys.stderr)
        return 2
    except HpcaiError as exc:
        print(f"hpcai: error: run spec {args.spec}: {exc.one_line()}", file=sys.stderr)
        return 2
    return run.execute()

