"""What one `hpcai-launch` invocation asks for, and the launcher's one-line log.
At the bottom of the launcher's layers: every launch mode reads these."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field


@dataclass
class Options:
    workload: str
    impl: str | None = None
    preset: str | None = None
    cap_w: float | None = None
    power_method: str | None = None
    site: str | None = None
    device: str = "auto"
    gpus: int | None = None
    nproc: int | None = None
    output: str | None = None
    dry_run: bool = False
    dry_run_json: bool = False  # --json: the dry run's plan as JSON
    telemetry: bool = True
    params: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)
    journal: str | None = None
    # A sweep (several caps, or --repeat N) when caps is set; cap_w is then unused.
    caps: list | None = None
    repeat: int = 1
    seed: int | None = None
    order: str = "shuffle"
    idle_s: float = 5.0
    runtime: str = "auto"  # auto | host | apptainer
    image: str | None = None  # a SIF to run instead of the images folder's
    slurm: object = None  # SlurmOptions: submit as a batch job instead of running here
    # Clock caps (--sm-clock/--mem-clock), MHz per GPU; the lists make a sweep
    # (a grid with the caps), as caps does.
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clocks: list | None = None
    mem_clocks: list | None = None
    # --power-profile: one NVML workload power profile per run; the list makes a sweep.
    power_profile: str | None = None
    power_profiles: list | None = None
    # --vary: [(param, [values])], a grid sweep (launcher/sweep/grid.py); --scaling with nodes.
    vary: list | None = None
    scaling: str | None = None
    in_run: bool | None = None  # sweeps: one process for every cap (None: where supported)
    # --wait-for-gpus: seconds to wait for another run's hold on these GPUs (0: refuse)
    wait_for_gpus_s: float = 0.0

    @property
    def is_sweep(self) -> bool:
        return self.caps is not None or bool(self.vary)


def log(message: str) -> None:
    print(f"hpcai: {message}", file=sys.stderr, flush=True)
