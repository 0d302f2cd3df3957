"""`make bench`: what measuring costs, reported as ratios from one run.

1. ResNet-50 throughput with the sampler at 100 ms against the sampler off,
   interleaved A/B runs through the real launcher (target: ratio >= 0.99).
2. The sampler's cost per tick and its share of one CPU core (target < 1%).
3. Management-library calls per tick and the time of one call, counted at
   the library's module: power and energy every tick, the rest once a
   second, against reading everything every tick; and from those, the
   share of a core for 8 GPUs at 100 ms.
4. Start-up time of `hpcai-launch --help`.
5. hpcai's default configuration against plain fp32 eager PyTorch, same
   model, batch and machine.
6. The node power sources' threads (RAPL, HPE Cray pm_counters) at their
   default intervals: their share of one core, and with the GPU sampler's.

Without a GPU the sampler reads the FAKE pynvml of the tests (eight
simulated GPUs for item 3): its per-call time is a JSON parse, NOT what real
NVML costs (a GSP RPC may take 0.1-0.7 ms on Hopper), so only the call
counts carry over. On a GPU node the real library is used and the per-call
time is the real one.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKES = ROOT / "tests" / "fakes"


def has_real_gpu() -> bool:
    from hpcai.gpu import open_library

    library = open_library("auto")
    if library is None:
        return False
    library.close()
    return True


def bench_env(tmp: Path, real_gpu: bool) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", HPCAI_STATE_DIR=str(tmp / "state"))
    if not real_gpu:
        sys.path.insert(0, str(FAKES.parent))
        from fakes import fake_gpu_state

        state = tmp / "fake-gpus.json"
        fake_gpu_state.write_state(state, fake_gpu_state.make_devices(2, "nvidia"))
        env["HPCAI_FAKE_GPU_STATE"] = str(state)
        env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")])
    return env


def launch(env: dict, out: Path, args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "hpcai.launcher.cli", "resnet50", "-o", str(out), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench run failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    newest = max(out.glob("*/result.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(newest.read_text())


def observer_effect(env: dict, out: Path, rounds: int, workload_args: list[str]) -> dict:
    on, off, overheads = [], [], []
    for i in range(rounds):
        # Alternate which goes first so drift (heat, caches) hits both alike.
        order = [("on", []), ("off", ["--no-telemetry"])]
        if i % 2:
            order.reverse()
        for name, extra in order:
            doc = launch(env, out, [*workload_args, *extra])
            (on if name == "on" else off).append(doc["throughput"]["node"])
            if name == "on" and doc["protocol"]["sampler_overhead"]:
                overheads.append(doc["protocol"]["sampler_overhead"])
            print(f"  round {i + 1} sampler {name:<3}: {doc['throughput']['node']:.2f} images/s",
                  flush=True)
    return {
        "ratio_per_round": [a / b for a, b in zip(on, off)],
        "throughput_on": on,
        "throughput_off": off,
        "ratio_on_off": statistics.median(on) / statistics.median(off),
        "mean_tick_s": statistics.fmean(o["mean_tick_s"] for o in overheads),
        "cpu_share_of_core": statistics.fmean(o["cpu_share_of_core"] for o in overheads),
    }


def library_calls(real_gpu: bool, tmp: Path, ticks: int = 50, interval_s: float = 0.1) -> dict:
    """Calls into the management library per sampler tick, and per-call time."""
    from hpcai.gpu import open_library
    from hpcai.measure.telemetry import Sampler

    if not real_gpu:
        sys.path.insert(0, str(FAKES.parent))
        from fakes import fake_gpu_state

        state = tmp / "fake-8-gpus.json"
        fake_gpu_state.write_state(state, fake_gpu_state.make_devices(8, "nvidia"))
        os.environ[fake_gpu_state.ENV] = str(state)
        sys.modules["pynvml"] = fake_gpu_state.load_fake_module("pynvml")
    library = open_library("auto")
    module = sys.modules["pynvml" if library.vendor == "nvidia" else "amdsmi"]
    prefix = "nvmlDevice" if library.vendor == "nvidia" else "amdsmi_get"
    spent = {"calls": 0, "s": 0.0}

    def counted(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent["s"] += time.perf_counter() - start
                spent["calls"] += 1
        return wrapper

    for name in [n for n in dir(module) if n.startswith(prefix) and callable(getattr(module, n))]:
        setattr(module, name, counted(getattr(module, name)))
    try:
        devices = library.devices()
        sampler = Sampler(devices, interval_s)
        per_tick = []
        for _ in range(ticks):
            before = spent["calls"]
            sampler._tick()
            per_tick.append(spent["calls"] - before)
        new_calls, new_s = spent["calls"], spent["s"]
        spent.update(calls=0, s=0.0)
        for _ in range(ticks):  # what every tick cost before: everything, every GPU
            for device in devices:
                device.read()
        old_calls = spent["calls"]
    finally:
        library.close()
    per_call_s = new_s / new_calls if new_calls else None
    gpus = len(devices)
    calls_per_s_8 = 8 / gpus * new_calls / ticks / interval_s
    return {"vendor": library.vendor, "gpus": gpus, "ticks": ticks,
            "calls_per_tick": {"power_tick": min(per_tick), "full_tick": max(per_tick),
                               "mean": new_calls / ticks},
            "calls_per_tick_reading_everything": old_calls / ticks,
            "calls_ratio_new_over_old": new_calls / old_calls,
            "per_call_s": per_call_s,
            "estimate_8_gpus_share_of_core": calls_per_s_8 * per_call_s if per_call_s else None}


def node_sources_cost(tmp: Path, seconds: float = 6.0) -> dict:
    """CPU share of one core taken by the node power threads at their default
    intervals: RAPL (this machine's /sys/class/powercap where readable, else a
    sysfs-shaped tree of 2 packages + 2 DRAM) and HPE Cray pm_counters (a
    sysfs-shaped tree: node, cpu, memory, 4 accelerators). The BMC (IPMI)
    source is not included: it needs a BMC, and its cost is a FreeIPMI
    process once a second, outside this process."""
    from hpcai.measure.node_power import NodePowerSampler
    from hpcai.measure.rapl import RaplSource
    from hpcai.measure.source import SourceError

    try:
        RaplSource()
        rapl_root, rapl_kind = "/sys/class/powercap", "real"
    except SourceError:
        rapl_root, rapl_kind = str(tmp / "powercap"), "sysfs-shaped tree"
        for p in range(2):
            for zone, name in ((f"intel-rapl:{p}", f"package-{p}"), (f"intel-rapl:{p}:0", "dram")):
                d = tmp / "powercap" / zone
                d.mkdir(parents=True, exist_ok=True)
                (d / "name").write_text(name + "\n")
                (d / "max_energy_range_uj").write_text("262143328850\n")
                (d / "energy_uj").write_text("1000000\n")
    pm = tmp / "pm_counters"
    pm.mkdir(exist_ok=True)
    for name in ["power", "energy", "cpu_power", "cpu_energy", "memory_power", "memory_energy"] + \
            [f"accel{i}_{q}" for i in range(4) for q in ("power", "energy")]:
        (pm / name).write_text(("500 W" if name.endswith("power") else "1000 J") + " 1700000000000000 us\n")
    (pm / "freshness").write_text("1\n")
    node = NodePowerSampler({"sources": ["rapl", "pm_counters"], "rapl": {"root": rapl_root},
                             "pm_counters": {"root": str(pm)}})
    start = time.monotonic()
    node.start()
    while time.monotonic() - start < seconds:  # freshness must advance, as on a real node
        (pm / "freshness").write_text(f"{int((time.monotonic() - start) * 10) + 2}\n")
        time.sleep(0.1)
    node.stop()
    wall = time.monotonic() - start
    cpu = node.summary(None)["cpu_s"]
    return {"rapl": rapl_kind, "seconds": wall, "cpu_s": cpu, "share_of_core": cpu / wall,
            "reads": sum(len(r.samples) for r in node.runs),
            "intervals_s": {r.source.kind: r.interval_s for r in node.runs}}


def help_startup(repeats: int = 10) -> dict:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hpcai.launcher.cli", "--help"],
                       capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    bare = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=True)
        bare.append(time.perf_counter() - start)
    return {"help_s": statistics.median(times), "bare_python_s": statistics.median(bare)}


def plain_pytorch(batch: int, image: int, steps: int) -> float:
    """The baseline: the textbook fp32 eager training loop, no hpcai."""
    import torch
    import torchvision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torchvision.models.resnet50(num_classes=1000).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * batch / 256, momentum=0.9)
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):  # warm-up
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    return batch * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="A/B pairs for the observer effect")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    real_gpu = has_real_gpu()
    device = "auto" if real_gpu else "cpu"
    workload = ["--preset", "tiny", "--device", device, "--batch-size", str(args.batch_size),
                "--steps-per-epoch", str(args.steps), "--epochs", "4"]
    if not real_gpu:
        workload += ["--nproc", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_env(Path(tmp), real_gpu)
        print(f"observer effect ({'real GPU library' if real_gpu else 'FAKE pynvml, no GPU'}):")
        observer = observer_effect(env, Path(tmp) / "results", args.rounds, workload)
        print("default configuration against plain fp32 eager PyTorch:")
        full = launch(env, Path(tmp) / "results",
                      ["--preset", "paper", "--device", device, "--batch-size", str(args.batch_size),
                       "--epochs", "3", "--steps-per-epoch", str(args.steps)]
                      + ([] if real_gpu else ["--nproc", "1"]))
        calls = library_calls(real_gpu, Path(tmp))
        node = node_sources_cost(Path(tmp))
    default_tp = full["throughput"]["per_gpu"]
    plain_tp = plain_pytorch(args.batch_size, 224, args.steps * 2)
    startup = help_startup()
    report = {
        "device": "gpu" if real_gpu else "cpu",
        "observer": observer,
        "default_vs_plain": {"default_images_s": default_tp, "plain_fp32_images_s": plain_tp,
                             "ratio": default_tp / plain_tp,
                             "default_config": {k: full["config"].get(k) for k in
                                                ("precision", "channels_last", "compile")}},
        "startup": startup,
        "library_calls": calls,
        "node_sources": node,
    }
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(f"{'measure':<48} {'value':>12}  target")
    print(f"{'throughput, sampler 100 ms / sampler off':<48} {observer['ratio_on_off']:>12.4f}  >= 0.99")
    spread = observer["ratio_per_round"]
    print(f"{'  per round, min .. max':<48} {min(spread):>5.3f} .. {max(spread):.3f}")
    print(f"{'sampler cost per tick (ms)':<48} {observer['mean_tick_s'] * 1e3:>12.3f}")
    print(f"{'sampler share of one CPU core':<48} {observer['cpu_share_of_core']:>12.2%}  < 1%")
    lib = f"{calls['vendor']} ({'real' if real_gpu else 'FAKE'}), {calls['gpus']} GPU(s)"
    print(f"{'library calls per tick, ' + lib:<48} {calls['calls_per_tick']['mean']:>12.1f}"
          f"  power ticks {calls['calls_per_tick']['power_tick']}, full ticks {calls['calls_per_tick']['full_tick']}")
    print(f"{'  calls / calls reading everything every tick':<48} {calls['calls_ratio_new_over_old']:>12.3f}")
    print(f"{'  time per library call (us)':<48} {calls['per_call_s'] * 1e6:>12.1f}"
          + ("" if real_gpu else "  (fake: a JSON parse)"))
    print(f"{'  8 GPUs at 100 ms, share of one core':<48} {calls['estimate_8_gpus_share_of_core']:>12.2%}  < 1%")
    print(f"{'node sources (RAPL ' + node['rapl'] + ', pm_counters)':<48} {node['share_of_core']:>12.2%}"
          f"  share of one core at {', '.join(f'{k} {v:g} s' for k, v in node['intervals_s'].items())}")
    both = observer['cpu_share_of_core'] + node['share_of_core']
    print(f"{'  GPU sampler + node sources':<48} {both:>12.2%}  < 1%")
    print(f"{'hpcai-launch --help (s)':<48} {startup['help_s']:>12.3f}  < 0.5")
    print(f"{'  bare python start-up (s)':<48} {startup['bare_python_s']:>12.3f}")
    print(f"{'default config / plain fp32 eager (224x224)':<48} {report['default_vs_plain']['ratio']:>12.2f}  > 1")
    print(f"report: {out / 'bench.json'}")


if __name__ == "__main__":
    main()
