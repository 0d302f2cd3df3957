"""`make bench`: wall time of an in-run cap sweep against one run per cap.

A 6-cap sweep (200:700:100 W) of `resnet50 --preset short` and of
`llama3-8b-pretrain --preset tiny`, once in-run (one process, one warm-up, a
settle phase and an adaptive window per cap) and once with one process per cap
(each with its own start-up, warm-up, settle and adaptive window), both at the
same --ci-target. Reported: both wall times, their ratio (target <= 0.5), and
the achieved 95% half-widths of throughput and energy per unit per cap.

Without a GPU the caps are set on the tests' FAKE pynvml (tests/fakes) and the
workloads train on the CPU; the ratio is what carries over, not the seconds.
A workload that cannot measure in-run falls back to one run per cap, and the
bench says so.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from observer_effect import ROOT, bench_env, has_real_gpu  # noqa: E402

CAPS = "200:700:100"
CASES = {"resnet50": ["resnet50", "--preset", "short"],
         "llama3-8b-pretrain": ["llama3-8b-pretrain", "--preset", "tiny"]}


def sweep(env: dict, out: Path, workload: list[str], mode: str, ci_target: float,
          device: list[str]) -> dict:
    """One sweep through the real launcher: its wall time and every cap's half-widths."""
    cmd = [sys.executable, "-m", "hpcai.launcher.cli", *workload, *device, "--cap", CAPS,
           "--ci-target", str(ci_target), "--seed", "1", "--idle-s", "0", mode, "-o", str(out)]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench sweep failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    (folder,) = [p for p in out.iterdir() if p.name.startswith("sweep-")]
    summary = json.loads((folder / "sweep.json").read_text())
    caps = []
    for run in summary["runs"]:
        doc = json.loads((folder / run["result"]).read_text())
        window = (doc.get("measurement") or {}).get("window") or {}
        widths = window.get("half_width") or {}
        caps.append({"cap_w": run["cap_w"], "stopped": window.get("stopped", "fixed protocol"),
                     "blocks": window.get("blocks"),
                     "measured_s": doc["work"]["measured_seconds"],
                     "throughput_half_width": widths.get("throughput_frac"),
                     "energy_per_unit_half_width": widths.get("energy_per_unit_frac")})
    fallback = "cannot measure in-run" in done.stderr
    return {"wall_s": wall, "in_run": bool(summary.get("in_run")), "fell_back": fallback,
            "caps": caps}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci-target", type=float, default=0.05,
                        help="the same confidence target for both sweeps")
    parser.add_argument("--workloads", default=",".join(CASES), help="comma list")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    real_gpu = has_real_gpu()
    device = [] if real_gpu else ["--device", "cpu", "--nproc", "1"]
    report = {"device": "gpu" if real_gpu else "cpu (FAKE pynvml caps)", "caps": CAPS,
              "ci_target": args.ci_target, "workloads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_env(Path(tmp), real_gpu)
        for name in args.workloads.split(","):
            workload = CASES[name]
            print(f"{name}: in-run sweep, then one run per cap ({CAPS} W, "
                  f"--ci-target {args.ci_target:g})", flush=True)
            in_run = sweep(env, Path(tmp) / f"{name}-inrun", workload, "--in-run",
                           args.ci_target, device)
            per_cap = sweep(env, Path(tmp) / f"{name}-percap", workload, "--no-in-run",
                            args.ci_target, device)
            report["workloads"][name] = {"in_run": in_run, "one_run_per_cap": per_cap,
                                         "ratio": in_run["wall_s"] / per_cap["wall_s"]}
    (out / "inrun_sweep.json").write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(f"{'workload':<20} {'in-run s':>9} {'per-cap s':>10} {'ratio':>7}  target <= 0.5")
    for name, entry in report["workloads"].items():
        note = "  (fell back to one run per cap)" if entry["in_run"]["fell_back"] else ""
        print(f"{name:<20} {entry['in_run']['wall_s']:>9.1f} "
              f"{entry['one_run_per_cap']['wall_s']:>10.1f} {entry['ratio']:>7.2f}{note}")
    print("achieved 95% half-widths (share of the mean): throughput / energy per unit")
    for name, entry in report["workloads"].items():
        for mode in ("in_run", "one_run_per_cap"):
            cells = ", ".join(f"{c['cap_w']:g} W {_fmt(c['throughput_half_width'])}/"
                              f"{_fmt(c['energy_per_unit_half_width'])} ({c['stopped']})"
                              for c in entry[mode]["caps"])
            print(f"  {name} {mode}: {cells}")
    print(f"report: {out / 'inrun_sweep.json'}")


if __name__ == "__main__":
    main()
