"""`make bench`: how the report scales with the number of results.

Synthetic results are made from one real tiny result (bench/data/, a
`resnet50 --preset tiny` run on fake GPUs), each with its own run id, cap, GPU
model, node, site and throughput, so the report has many cells and every
file a different content hash. For each size (1k, 10k, 100k by default) the
report runs twice in a fresh process: cold (no results index, no earlier
report) and warm (the index and the report folder of the cold run, whose plots
are kept: report/kept_plots.py). Printed per run: seconds, peak memory of the
report's processes together (the report is made in forked workers, so one process's
maximum resident set says too little: the sum of their proportional set sizes,
PSS, which counts a page shared by two processes half in each, sampled every
0.25 s), CPU seconds (user + system, its worker processes included: on a shared
machine wall time follows the other users' load, CPU time much less), and the
slope (seconds per result), so growth faster than linear shows as a rising
slope.

    .venv/bin/python bench/report_scaling.py --sizes 1000,10000
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "bench" / "data" / "resnet50-tiny-result.json"
GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X"]
CAPS = [None, 200.0, 300.0, 400.0, 500.0, 600.0]
SITES = ["alpha", "beta"]
SAMPLE_S = 0.25  # the memory sampler's interval (_TreePeak)


def synthesise(folder: Path, count: int, template: Path = TEMPLATE) -> None:
    """count result folders under folder, varied from the template."""
    base = json.loads(template.read_text())
    for i in range(count):
        doc = copy.deepcopy(base)
        run_id = f"synthetic-{i:06d}"
        # A campaign: each node sweeps the caps, three repeats each (one sweep per node).
        node = i // (3 * len(CAPS))
        gpu, cap, site = GPUS[node % len(GPUS)], CAPS[(i // 3) % len(CAPS)], SITES[(node // 4) % 2]
        doc["run_id"] = doc["spec"]["run_id"] = run_id
        doc["spec"]["power"]["cap_w"] = cap
        doc["spec"]["site"]["name"] = site
        doc["host"]["node"] = doc["host"]["hostname"] = f"node{node:05d}"
        doc["spec"]["sweep"] = {"id": f"sweep-node{node:05d}", "key": "k", "position": i % 18,
                                "repeat": i % 3, "repeats": 3, "order": "alternate"}
        doc["config"]["device_type"] = doc["spec"]["devices"]["type"] = "cuda"
        for g in doc["gpus"]:
            g["name"] = gpu
            g["vendor"] = "amd" if "AMD" in gpu else "nvidia"
        scale = 1 + (i % 97) / 1000  # a spread, so repeats have a variance
        tp = doc["throughput"]
        for key in ("per_gpu", "node"):
            if tp.get(key) is not None:
                tp[key] *= scale
        tp["per_epoch_node"] = [v * scale for v in tp.get("per_epoch_node") or []]
        # The same units in less time: the figures still agree with their records
        # (validity's figures_consistency), so every result is a usable repeat.
        doc["work"]["measured_seconds"] /= scale
        run = folder / f"{i // 1000:03d}" / run_id
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(doc))


def measure(argv: list[str], env: dict) -> tuple[float, float, float]:
    """(seconds, peak MiB of the process tree's PSS, CPU seconds) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = _TreePeak(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    peak.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"report failed: {proc.stderr.read().decode()[-2000:]}")
    return seconds, peak.mib, usage.ru_utime + usage.ru_stime


class _TreePeak:
    """The largest sum of PSS over a process and its descendants, sampled in a thread
    (a process's own ru_maxrss misses its workers; summing their RSS would count the
    pages they share after fork once per process)."""

    def __init__(self, pid: int):
        self.pid, self.mib = pid, 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        # Reading a process's smaps_rollup walks its page tables under its memory
        # lock: 12 ms for 830 MB here. At 50 ms that cost the report a tenth of its
        # time on 2 cores; at SAMPLE_S about 2%, and its memory holds its peak for
        # seconds (the runs, loaded once), long enough to be seen.
        while not self._done.wait(SAMPLE_S):
            kib = sum(_pss_kib(pid) for pid in _tree(self.pid))
            self.mib = max(self.mib, kib / 1024)


def _tree(root: int) -> list[int]:
    """root and its descendants, from each process's parent in /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as fh:
                    ppid = int(fh.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass  # ended, or a zombie
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="numbers of results, comma-separated")
    parser.add_argument("--keep", help="make the results under this folder and keep them")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="hpcai-report-scaling-"))
    print("results  index  seconds  peak MiB  cpu seconds  ms per result  (peak: all its processes, PSS)")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            folder = work / f"results-{size}"
            if not folder.exists():
                synthesise(folder, size)
            env = dict(os.environ, HPCAI_RESULTS_INDEX=str(work / f"index-{size}.duckdb"),
                       MPLBACKEND="Agg")
            for path in (work / f"index-{size}.duckdb", work / f"index-{size}.duckdb.wal"):
                path.unlink(missing_ok=True)
            shutil.rmtree(work / f"report-{size}", ignore_errors=True)  # its kept plots too
            for state in ("cold", "warm"):
                argv = [sys.executable, "-m", "hpcai.launcher.cli", "report", str(folder),
                        "-o", str(work / f"report-{size}")]
                seconds, mib, cpu = measure(argv, env)
                print(f"{size:7d}  {state:5s}  {seconds:7.1f}  {mib:8.0f}  {cpu:11.1f}  "
                      f"{seconds / size * 1000:13.3f}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
