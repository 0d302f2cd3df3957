"""A GPU load for the self-test: one child process per GPU multiplying bf16
matrices until stopped. The launcher never imports torch; the child does,
and says when it cannot (no torch, or no GPU for it)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

READY_TIMEOUT_S = 120  # torch import and CUDA context on a cold node
NO_GPU_EXIT = 3

_CHILD = r"""
import sys
try:
    import torch
except ImportError:
    print("torch is not installed", flush=True); sys.exit(3)
if not torch.cuda.is_available():
    print("torch sees no GPU", flush=True); sys.exit(3)
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
(a @ b); torch.cuda.synchronize()
print("ready", flush=True)
while True:
    for _ in range(8):
        c = a @ b
    torch.cuda.synchronize()
"""


class GpuLoad:
    """`with GpuLoad(ids, vendor) as load:` load.active says whether it runs;
    load.why says why not."""

    def __init__(self, visible_ids: list[str], vendor: str | None, enabled: bool = True):
        self.ids, self.vendor, self.enabled = visible_ids, vendor, enabled
        self.children: list[subprocess.Popen] = []
        self.active, self.why = False, "load turned off (--no-load)"

    def __enter__(self) -> GpuLoad:
        if not self.enabled or not self.ids:
            return self
        from hpcai.launcher.run.visibility import workload_environment

        for gpu_id in self.ids:
            env = dict(os.environ)
            workload_environment(env, self.vendor, [gpu_id])
            self.children.append(subprocess.Popen(
                [sys.executable, "-c", _CHILD], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                start_new_session=True))
        deadline = time.monotonic() + READY_TIMEOUT_S
        for child in self.children:
            line = child.stdout.readline().strip()  # blocks until it says something or exits
            if line != "ready" or time.monotonic() > deadline:
                self.why = line or f"the load process exited with code {child.wait()}"
                self.__exit__()
                return self
        self.active, self.why = True, None
        return self

    def __exit__(self, *exc) -> None:
        for child in self.children:
            if child.poll() is None:
                try:
                    os.killpg(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        self.children = []
        self.active = False
