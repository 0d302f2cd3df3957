"""`make bench`: per-job energy receipts (issue 44 §1), their cost and their scale.

Cost: the prolog's and the epilog's halves (launcher/receipts/record.py begin and
finish) on 8 FAKE GPUs (tests/fakes/pynvml.py) whose every library call is held
for a per-call latency: 25, 100 and 500 us, the range of public figures for one
NVML call (/work/shared/notes/gpu-bindings-review.md: 22 us on an RTX 5080, 365 us
on a K40m, 499-706 us for a GSP RPC). Printed: the library calls made and the wall
time of start + end, and, apart, the start-up of a fresh `hpcai-job-receipt`
process (Python and its imports), paid once per half. Slurm's scontrol calls
(three per half) are not in it: the real-Slurm test runs them.

Ingest: 20,000 receipt files in a spool read into a new store (cold) and again (warm:
nothing new).

Scale: 1,000,000 synthetic receipts (1-8 GPUs each, three partitions, 300
users, four GPU models, a year of start times) made by one SQL statement in a
store file; then `hpcai-launch results jobs --summary partition|user|gpu` and
`--as-mix`, each in a fresh process: cold (the first open of the store after it
was written) and warm (again). Printed per run: seconds, peak MiB (PSS of the
process tree, bench/report_scaling.py's measure) and CPU seconds.

    .venv/bin/python bench/job_receipts.py [--receipts 1000000] [--latencies-us 25,100,500]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from report_scaling import measure  # noqa: E402 (one way to measure a process, the report's)

SUMMARIES = ("partition", "user", "gpu")
CLASSES = ('name = "receipts-bench"\n\n[[classes]]\nname = "llm"\nworkload = "llama3-8b-pretrain"\njob_name = "llama*"\n\n'
           '[[classes]]\nname = "cv"\nworkload = "resnet50"\njob_name = "resnet*"\n')


# ---- cost ---------------------------------------------------------------------------------
def _slow_library(pynvml, latency_s: float) -> list[int]:
    """Every nvml* function of the FAKE module held for latency_s (a busy wait: sleep's
    own granularity is about as long as the shortest latency). Returns a call counter."""
    calls = [0]

    def held(real):
        def slow(*args, **kwargs):
            calls[0] += 1
            until = time.perf_counter() + latency_s
            while time.perf_counter() < until:
                pass
            return real(*args, **kwargs)
        return slow

    for name in [n for n in dir(pynvml) if n.startswith("nvml") and callable(getattr(pynvml, n))]:
        setattr(pynvml, name, held(getattr(pynvml, name)))
    return calls


def cost(latency_us: float, work: Path) -> tuple[int, float, float]:
    """(library calls, wall seconds, CPU seconds) of one job's start and end on 8 slow
    fake GPUs (the held latency is a busy wait, so it is in the CPU time too)."""
    import importlib

    from fakes import fake_gpu_state as fgs

    state = work / f"gpus-{latency_us:g}.json"
    fgs.write_state(state, fgs.make_devices(8, "nvidia"))
    os.environ["HPCAI_FAKE_GPU_STATE"] = str(state)
    sys.modules.pop("pynvml", None)
    pynvml = importlib.import_module("pynvml")  # the FAKE one: tests/fakes first on sys.path
    calls = _slow_library(pynvml, latency_us / 1e6)
    from hpcai.launcher.receipts import record

    site = {"receipts": {"spool": str(work / f"spool-{latency_us:g}")}}
    job = {"job_id": "1", "node": "node1", "user": "u", "uid": 1000, "account": "a", "partition": "gpu",
           "job_name": "j", "qos": "normal", "restarts": 0, "slurm_state": "COMPLETING",
           "exit_code": "0:0", "end_state": "completed", "gpu_indices": None}
    start, cpu = time.perf_counter(), time.process_time()
    record.begin(job, site)
    record.finish(job, site)
    return calls[0], time.perf_counter() - start, time.process_time() - cpu


def startup_s() -> tuple[float, float]:
    """(wall, CPU seconds) of a fresh process that imports what `hpcai-job-receipt`
    imports before it works."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import hpcai.launcher.receipts.cli, "
                             "hpcai.launcher.receipts.record, hpcai.gpu.nvidia, hpcai.measure.node_power, "
                             "hpcai.launcher.site.tier, hpcai.launcher.site.trust"])
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


# ---- scale --------------------------------------------------------------------------------
SYNTHESISE = """
INSERT INTO receipts SELECT
  printf('%d.0.node%04d.json', i, i % 2000), i::VARCHAR, 0, printf('node%04d', i % 2000), 'host',
  printf('user%03d', i % 300), 1000 + i % 300, printf('acct%02d', i % 40),
  ['gpu', 'gpu', 'large', 'debug'][1 + i % 4],
  ['llama-pretrain', 'resnet-train', 'misc'][1 + (i // 7) % 3] || printf('-%d', i % 50), 'normal',
  CASE WHEN i % 50 = 0 THEN 'killed' WHEN i % 97 = 0 THEN 'failed' ELSE 'completed' END,
  'COMPLETING', '0:0', g, TIMESTAMP '2026-01-01' + to_seconds(i * 31),
  TIMESTAMP '2026-01-01' + to_seconds(i * 31 + d), d, g * d / 3600.0, g * d * (300 + i % 400), NULL,
  NULL, NULL, '', '',
  CASE WHEN i % 3 = 0 THEN 'node-meter' ELSE 'counter' END, NULL, 0.05, NULL, NULL, NULL
FROM (SELECT i, [1, 2, 4, 8][1 + (i // 3) % 4] AS g, 600 + (i * 7919) % 86000 AS d FROM range(?) t(i))
"""
SYNTHESISE_GPUS = """
INSERT INTO receipt_gpus SELECT
  r.file, printf('GPU-%d-%d', r.job_id::BIGINT, k), k,
  ['H100', 'H200', 'A100', 'MI300X'][1 + (hash(r.node) % 4)::INTEGER], NULL, false,
  r.gpu_energy_j / r.gpu_count, 'counter', 0, r.gpu_energy_j / r.gpu_count, 400, 400, 450, 450, 700,
  'policy', 1980, 2619, 'not hpcai'
FROM receipts r, range(r.gpu_count) t(k)
"""


def synthesise(db: Path, count: int) -> None:
    import duckdb

    from hpcai.launcher.receipts.store import create_tables

    con = duckdb.connect(str(db))
    create_tables(con)
    con.execute(SYNTHESISE, [count])
    con.execute(SYNTHESISE_GPUS)
    con.close()


def scale(count: int, work: Path) -> None:
    db, spool, site = work / "store.duckdb", work / "empty-spool", work / "site.toml"
    spool.mkdir(mode=0o755)
    site.write_text(CLASSES)
    start = time.perf_counter()
    synthesise(db, count)
    print(f"{count:,} receipts synthesised in {time.perf_counter() - start:.1f} s "
          f"({db.stat().st_size / 2**20:.0f} MiB store)")
    base = [sys.executable, "-m", "hpcai.launcher.cli", "results", "jobs", "--spool", str(spool), "--store", str(db)]
    cases = [(f"--summary {s}", base + ["--summary", s]) for s in SUMMARIES]
    cases.append(("--as-mix", base + ["--site", str(site), "--as-mix", str(work / "mix.toml")]))
    print("case                 run    seconds  peak MiB  cpu seconds")
    for name, argv in cases:
        for state in ("cold", "warm"):
            seconds, mib, cpu = measure(argv, dict(os.environ))
            print(f"{name:20s} {state:5s}  {seconds:7.2f}  {mib:8.0f}  {cpu:11.2f}", flush=True)


def ingest(count: int, work: Path) -> None:
    """count receipt files (one receipt of 8 GPUs, renamed) ingested into a new store, cold."""
    import json

    template = {"format": 1, "kind": "hpcai-job-receipt", "restarts": 0, "node": "node1", "user": "u",
                "partition": "gpu", "state": "completed", "gpu_count": 8, "start": "2026-11-01T00:00:00Z",
                "end": "2026-11-01T01:00:00Z", "duration_s": 3600.0, "lost_gpus": [], "problems": [],
                "gpus": [{"uuid": f"GPU-{k}", "index": k, "model": "H100", "energy_j": 1.8e6,
                          "energy_method": "counter", "cap_w": 500.0} for k in range(8)]}
    folder = work / "ingest-spool"
    folder.mkdir(mode=0o755)
    for i in range(count):  # plain writes: the epilog's fsync per file is not what is measured here
        (folder / f"{i}.0.node1.json").write_text(json.dumps({**template, "job_id": str(i)}) + "\n")
    argv = [sys.executable, "-m", "hpcai.launcher.cli", "results", "jobs", "--spool", str(folder),
            "--store", str(work / "ingest.duckdb"), "--summary", "partition"]
    print("ingest               run    seconds  peak MiB  cpu seconds")
    for state in ("cold", "warm"):
        seconds, mib, cpu = measure(argv, dict(os.environ))
        print(f"{count:,} files{'':9s} {state:5s}  {seconds:7.2f}  {mib:8.0f}  {cpu:11.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receipts", type=int, default=1_000_000)
    parser.add_argument("--latencies-us", default="25,100,500")
    parser.add_argument("--files", type=int, default=20_000, help="receipt files to ingest from a spool")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hpcai-job-receipts-"))
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fakes"))
        print("per-call latency  library calls  start + end (8 GPUs): wall ms  cpu ms")
        for latency in (float(v) for v in args.latencies_us.split(",")):
            calls, wall, cpu = cost(latency, work)
            print(f"{latency:11g} us  {calls:13d}  {wall * 1000:29.1f}  {cpu * 1000:6.1f}", flush=True)
        wall, cpu = startup_s()
        print(f"a fresh hpcai-job-receipt process's start-up (paid by each half): "
              f"{wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms cpu")
        ingest(args.files, work)
        scale(args.receipts, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
