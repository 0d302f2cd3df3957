"""A plain numerical kernel, no framework: Jacobi iterations of the 2-D Laplace
equation on a grid until the update falls below a tolerance (a solve with a
time to solution). Prints one progress line per 50 sweeps."""
import sys

import numpy as np

n = int(sys.argv[1]) if len(sys.argv) > 1 else 96
tol = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-4
grid = np.zeros((n, n))
grid[0, :] = 1.0  # a hot edge
sweeps = 0
while True:
    new = grid.copy()
    new[1:-1, 1:-1] = 0.25 * (grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:])
    change = float(np.abs(new - grid).max())
    grid = new
    sweeps += 1
    if sweeps % 50 == 0:
        print(f"sweeps done: {sweeps} change {change:.2e}", flush=True)
    if change < tol:
        break
print(f"converged after {sweeps} sweeps, centre value {grid[n // 2, n // 2]:.6f}", flush=True)
