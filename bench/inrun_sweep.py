"""`make bench`: wall time of an in-run cap sweep against one run per cap.

A 6-cap sweep (200:700:100 W) of `resnet50 --preset short` and of
`llama3-8b-pretrain --preset tiny`, once in-run (one process, one warm-up, a
settle phase and an adaptive window per cap) and once with one process per cap
(each with its own start-up, warm-up, settle and adaptive window), both at the
same --ci-target. Reported: both wall times, their ratio (target <= 0.5), and
the achieved 95% half-widths of throughput and energy per unit per cap.

It also prints where each mode's wall time goes (seconds per phase, from the
timestamps in the results): in-run saves the per-cap launch, process start and
exit, model build and warm-up; the settle and the windows after each cap change
it must spend as one run per cap does. Their share of the one-run-per-cap wall
time is the ratio's floor, printed beside it: when the windows run long (steps
noisy on a shared CPU, so the target is not met before the maximum window) and
the model builds in seconds (the tiny LitGPT model), the floor nears 0.5.

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
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from observer_effect import ROOT, bench_env, has_real_gpu  # noqa: E402

CAPS = "200:700:100"
CASES = {"resnet50": ["resnet50", "--preset", "short"],
         "llama3-8b-pretrain": ["llama3-8b-pretrain", "--preset", "tiny"]}


# Where a sweep's wall time goes, from the timestamps its results carry (the same
# phases for both modes, so the table shows what in-run saves and what it cannot).
PHASES = {
    "launch": "launcher, process start and exit",
    "setup": "imports, model build, engine set-up",
    "warmup": "warm-up",
    "settle": "settle after each cap change",
    "window": "measured windows",
    "boundary": "segment/result writing, control channel",
}


def _stamp(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def phases(folder: Path, runs: list[dict], t0: float, t1: float) -> dict:
    """Seconds per phase. Each result holds: `started` (its process, or its segment,
    began), its epochs (warm-up and settle epochs, then the window's blocks), the
    settle record and `finished`. In-run, process.json holds the process's start
    and its warm-up epochs; what lies between processes (interpreter exit, the
    launcher filing a result and setting the next cap, Python start) is `launch`."""
    out = dict.fromkeys(PHASES, 0.0)
    runs = sorted(runs, key=lambda d: _stamp(d["timestamps"]["started"]))
    processes = [json.loads(p.read_text()) for p in folder.glob("*/process.json")]
    if processes:  # in-run: one process, then its segments
        proc = processes[0]
        begun, first_step = _stamp(proc["timestamps"]["started"]), proc["epochs"][0]["start"]
        out["launch"] += begun - t0
        out["setup"] += first_step - begun
        out["warmup"] += _stamp(runs[0]["timestamps"]["started"]) - first_step
    last = t0
    for doc in runs:
        started, finished = _stamp(doc["timestamps"]["started"]), _stamp(doc["timestamps"]["finished"])
        measured = [e for e in doc["epochs"] if not e["warmup"]]
        if not measured:  # a segment cut short: all of it is boundary
            out["boundary"] += finished - max(last, started)
            last = finished
            continue
        opened, closed = measured[0]["start"], measured[-1]["end"]
        settle = (doc.get("measurement") or {}).get("settle", {}).get("seconds", 0.0)
        if processes:
            out["boundary"] += started - last if last > t0 else 0.0
            out["settle"] += opened - started  # from the launcher's answer
        else:
            out["launch"] += started - last
            out["setup"] += doc["epochs"][0]["start"] - started
            out["warmup"] += opened - settle - doc["epochs"][0]["start"]
            out["settle"] += settle
        out["window"] += closed - opened
        out["boundary"] += finished - closed
        last = finished
    out["launch"] += t1 - last
    return out


def sweep(env: dict, out: Path, workload: list[str], mode: str, ci_target: float,
          device: list[str]) -> dict:
    """One sweep through the real launcher: its wall time, every cap's half-widths,
    and the seconds per phase."""
    cmd = [sys.executable, "-m", "hpcai.launcher.cli", *workload, *device, "--cap", CAPS,
           "--ci-target", str(ci_target), "--seed", "1", "--idle-s", "0", mode, "-o", str(out)]
    start, t0 = time.perf_counter(), time.time()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall, t1 = time.perf_counter() - start, time.time()
    if done.returncode != 0:
        raise SystemExit(f"bench sweep failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    (folder,) = [p for p in out.iterdir() if p.name.startswith("sweep-")]
    summary = json.loads((folder / "sweep.json").read_text())
    caps, docs = [], []
    for run in summary["runs"]:
        doc = json.loads((folder / run["result"]).read_text())
        docs.append(doc)
        window = (doc.get("measurement") or {}).get("window") or {}
        widths = window.get("half_width") or {}
        caps.append({"cap_w": run["cap_w"], "stopped": window.get("stopped", "fixed protocol"),
                     "blocks": window.get("blocks"),
                     "measured_s": doc["work"]["measured_seconds"],
                     "throughput_half_width": widths.get("throughput_frac"),
                     "energy_per_unit_half_width": widths.get("energy_per_unit_frac")})
    fallback = "cannot measure in-run" in done.stderr
    return {"wall_s": wall, "in_run": bool(summary.get("in_run")), "fell_back": fallback,
            "caps": caps, "phases_s": phases(folder, docs, t0, t1)}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_breakdown(name: str, entry: dict) -> None:
    """Both modes' seconds per phase; and the ratio's floor: the settle and windows
    both modes spend at the same target, over the one-run-per-cap wall time."""
    inrun, percap = entry["in_run"], entry["one_run_per_cap"]
    print(f"{name}: seconds per phase")
    print(f"  {'phase':<42} {'in-run':>8} {'per-cap':>8} {'saved':>8}")
    for key, label in PHASES.items():
        a, b = inrun["phases_s"][key], percap["phases_s"][key]
        print(f"  {label:<42} {a:>8.1f} {b:>8.1f} {b - a:>8.1f}")
    print(f"  {'wall':<42} {inrun['wall_s']:>8.1f} {percap['wall_s']:>8.1f} "
          f"{percap['wall_s'] - inrun['wall_s']:>8.1f}")
    print(f"  floor of the ratio (per-cap settle + windows / per-cap wall): "
          f"{entry['floor']:.2f}: the part in-run cannot save")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci-target", type=float, default=0.05,
                        help="the same confidence target for both sweeps")
    parser.add_argument("--workloads", default=",".join(CASES), help="comma list")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    parser.add_argument("--rounds", type=int, default=1,
                        help="pairs of sweeps per workload, alternating which mode goes "
                             "first (on a shared machine the load drifts between the two)")
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
            for r in range(args.rounds):
                key = name if r == 0 else f"{name} (round {r + 1})"
                modes = [("in_run", "--in-run"), ("one_run_per_cap", "--no-in-run")]
                if r % 2:
                    modes.reverse()
                print(f"{key}: {' sweep, then '.join(m[1] for m in modes)} sweep ({CAPS} W, "
                      f"--ci-target {args.ci_target:g})", flush=True)
                entry = {mode: sweep(env, Path(tmp) / f"{name}-{r}-{mode}", CASES[name], flag,
                                     args.ci_target, device) for mode, flag in modes}
                in_run, per_cap = entry["in_run"], entry["one_run_per_cap"]
                spent = per_cap["phases_s"]["settle"] + per_cap["phases_s"]["window"]
                report["workloads"][key] = {"in_run": in_run, "one_run_per_cap": per_cap,
                                            "ratio": in_run["wall_s"] / per_cap["wall_s"],
                                            "floor": spent / per_cap["wall_s"]}
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
    for name, entry in report["workloads"].items():
        print_breakdown(name, entry)
    print(f"report: {out / 'inrun_sweep.json'}")


if __name__ == "__main__":
    main()
