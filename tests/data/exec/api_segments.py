"""A plain Python loop for an in-run sweep under `hpcai-launch exec --api --cap
A,B`: one warm-up window, then WINDOWS measured ones (argv[1], default 2), each
one segment at the sweep's next cap; with argv[2] == "fail", the last window
raises midway (a program that crashes); with argv[2] == "daemon", it leaves a
daemon behind (own session, empty environment; its pid in the file argv[3]),
which outlives the program. A window lasts 1.5 s or more (longer than
NVML's 1 s power average, so its validity holds), counting every cell it relaxed."""
import os
import sys
import time

import numpy as np

import hpcai.measure as measure

N = 200
WINDOWS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
FAIL = sys.argv[2:] == ["fail"]
DAEMON_PIDFILE = sys.argv[3] if sys.argv[2:3] == ["daemon"] else None
grid = np.zeros((N, N))
grid[0, :] = 1.0


def relax(sweeps: int) -> None:
    global grid
    for _ in range(sweeps):
        new = grid.copy()
        new[1:-1, 1:-1] = 0.25 * (grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:])
        grid = new
        measure.step((N - 2) ** 2)


with measure.window("warm-up", warmup=True, unit="cells"):
    relax(10)
for index in range(WINDOWS):
    with measure.window("relax", unit="cells"):
        opened = time.monotonic()
        while time.monotonic() - opened < 1.5:
            relax(50)
            if FAIL and index == WINDOWS - 1:
                raise SystemExit("the solver diverged in the last window")
print("relaxed", float(grid[N // 2, N // 2]))


def leave_a_daemon(pidfile: str) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pidfile, "w") as fh:
                fh.write(str(os.getpid()))
            os.execve("/bin/sleep", ["sleep", "300"], {})
        os._exit(0)
    os.wait()
    while not os.path.exists(pidfile) or not open(pidfile).read():
        time.sleep(0.01)


if DAEMON_PIDFILE:
    leave_a_daemon(DAEMON_PIDFILE)
