"""A plain Python loop that measures itself with hpcai.measure: one warm-up
window, then three measured ones, each counting the cells it relaxed."""
import numpy as np

import hpcai.measure as measure

N = 300
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
    relax(20)
for _ in range(3):
    with measure.window("relax", unit="cells"):
        relax(400)
print("relaxed", float(grid[N // 2, N // 2]))
