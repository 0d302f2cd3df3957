"""`make demo`: hpcai's whole flow on SIMULATED GPUs, on a laptop, in minutes.

The GPUs are the test suite's fake NVML (tests/fakes/pynvml.py, not NVIDIA's
library): their power follows the caps the launcher sets, their energy counters
count, but nothing is measured on real hardware, and the workload itself runs on
this machine's CPU. Everything the demo writes says so: the GPUs are named
"SIMULATED ...", the site is "demo-simulated", the driver "simulated", and the
report's title begins with SIMULATED. Its figures show how hpcai works, never
how a GPU performs.

It writes under build/demo/ (ignored by git): the simulated node's state, a site
file, a cap sweep's results, the report over them and a plan for a one-class mix.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKES = ROOT / "tests" / "fakes"
SIMULATED = "SIMULATED NVIDIA H100 (hpcai demo, not a measurement)"
TITLE = "SIMULATED GPUs (make demo): how hpcai works, not a measurement"
SITE = """name = "demo-simulated"
description = "SIMULATED GPUs (make demo, tests/fakes): the figures show how hpcai works, not how a GPU performs"
[gpu]
vendor = "nvidia"
per_node = {gpus}
[power]
method = "nvml"
node_overhead_w = 100
"""


def simulated_node(folder: Path, gpus: int) -> Path:
    """The fake NVML's state file: `gpus` simulated boards, labelled as such."""
    sys.path.insert(0, str(FAKES))
    import fake_gpu_state

    state = folder / "gpus.json"
    devices = fake_gpu_state.make_devices(gpus, "nvidia", name=SIMULATED)
    fake_gpu_state.write_state(state, devices, driver_version="simulated", nvml_version="simulated")
    return state


INVALID_EXIT = 3  # hpcai/errors.py: measured, but a validity check failed


def launch(env: dict, *args: str) -> None:
    command = [sys.executable, "-m", "hpcai.launcher.cli", *args]
    print("$ hpcai-launch " + " ".join(args), flush=True)
    done = subprocess.run(command, env=env, cwd=ROOT)
    if done.returncode == INVALID_EXIT:  # part of the story: the report says which and why
        print("demo: a run failed a validity check (above); the report lists it under \"Runs not included\"")
    elif done.returncode != 0:
        raise SystemExit(f"demo: `hpcai-launch {' '.join(args)}` failed (exit {done.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2, help="simulated GPUs (default 2)")
    # Below the simulated boards' 650 W draw, so every cap binds (the fake's power is min(draw, cap)).
    parser.add_argument("--caps", default="300,400,500", help="caps of the sweep, W (default 300,400,500)")
    parser.add_argument("-o", "--output", default=str(ROOT / "build" / "demo"), help="folder (default build/demo)")
    args = parser.parse_args(argv)
    folder = Path(args.output).absolute()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    site = folder / "demo-simulated.toml"
    site.write_text(SITE.format(gpus=args.gpus))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]),
           "HPCAI_FAKE_GPU_STATE": str(simulated_node(folder, args.gpus)),
           "HPCAI_STATE_DIR": str(folder / "state"), "HPCAI_SITE": str(site)}
    print(f"demo: {args.gpus} SIMULATED GPU(s) (tests/fakes), the workload on this CPU; under {folder}")
    launch(env, "info")
    launch(env, "resnet50", "--preset", "tiny", "--device", "cpu", "--nproc", "1", "--cap", args.caps,
           "-o", str(folder / "results"))
    launch(env, "report", str(folder / "results"), "-o", str(folder / "report"), "--title", TITLE)
    mix = folder / "mix.toml"  # a partition that runs only this workload: the plan's default cap
    mix.write_text('[[class]]\nname = "demo"\nworkload = "resnet50"\npreset = "tiny"\nshare = 1.0\n')
    launch(env, "plan", str(folder / "results"), "--mix", str(mix), "-o", str(folder / "plan"))
    print(f"demo: done. Open {folder / 'report' / 'report.html'} and {folder / 'plan' / 'plan.html'} "
          "(SIMULATED): the flow is hpcai's, the figures are a simulation's.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
