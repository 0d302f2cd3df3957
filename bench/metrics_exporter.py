"""`make bench`: the metrics exporter's CPU share on a node of 8 FAKE GPUs, scraped
every 15 s as Prometheus does by default.

`hpcai-launch metrics serve` runs as its own process on 8 fake H100s
(tests/fakes/pynvml.py, which re-reads its JSON state file on every NVML call:
dearer than the real library's ioctl, so the figure errs high). After one warm-up
scrape (imports, first NVML calls), this scrapes it --scrapes times, --interval
seconds apart, and reads the exporter's own CPU time (utime + stime, its threads
included, /proc/PID/stat) over that span. Printed as JSON: the CPU share (CPU
seconds per wall second), CPU ms per scrape and the exporter's own read time;
nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fakes import fake_gpu_state as fgs  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_exporter(folder: Path, gpus: int) -> tuple[subprocess.Popen, str]:
    state = folder / "gpus.json"
    fgs.write_state(state, fgs.make_devices(gpus, "nvidia", power_draw_w=550.0))
    env = dict(os.environ, HPCAI_FAKE_GPU_STATE=str(state), HPCAI_STATE_DIR=str(folder / "state"),
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "fakes"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "hpcai.launcher.cli", "metrics", "serve", "--port", "0"],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    line = proc.stderr.readline()
    match = re.search(r"on (http://\S+/metrics)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the exporter did not start: {line}{proc.stderr.read()}")
    return proc, match.group(1)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.read().decode()


def read_seconds(text: str) -> float:
    return float(re.search(r"^hpcai_exporter_read_seconds (\S+)$", text, re.M).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between scrapes (Prometheus: 15 s)")
    parser.add_argument("--scrapes", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcai-metrics-bench-") as tmp:
        proc, url = start_exporter(Path(tmp), args.gpus)
        try:
            scrape(url)  # warm-up: imports and the first NVML calls are not the steady cost
            cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
            reads = []
            for k in range(args.scrapes):
                time.sleep(max(0.0, wall0 + (k + 1) * args.interval - time.monotonic()))
                reads.append(read_seconds(scrape(url)))
            cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - wall0
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps({
        "bench": "metrics_exporter", "gpus": args.gpus, "scrape_interval_s": args.interval,
        "scrapes": args.scrapes, "wall_s": round(wall, 2), "cpu_s": round(cpu, 3),
        "cpu_share_pct": round(100 * cpu / wall, 3), "cpu_ms_per_scrape": round(1000 * cpu / args.scrapes, 1),
        "read_ms_median": round(1000 * sorted(reads)[len(reads) // 2], 1),
        "clock_tick_s": 1 / TICKS,
    }, indent=2))


if __name__ == "__main__":
    main()
