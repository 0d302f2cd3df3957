"""The report's scaling-study sections from hand-made runs: device parallelism
states the GPU counts that minimise time, energy and Action; node scaling sums
a run's node results and divides by N x one node; the runtime split table."""
from pathlib import Path

from hpcai.launcher.report import scaling
from hpcai.launcher.report.load import Run
from hpcai.launcher.report.stats import aggregate


def run(run_id, processes, node, energy_j=None, **fields):
    r = Run(Path(f"/r/{run_id}/result.json"), run_id, status="complete", workload="resnet50",
            preset="tiny", unit="images/s", work_unit="images", device="H100",
            device_full="NVIDIA H100", device_type="cuda", site="s", processes=processes,
            node=node, per_gpu=node / processes, per_epoch_per_gpu=[node / processes] * 3,
            units=node * 10, window_s=10.0, node_overhead_w=0.0,
            power_available=energy_j is not None, energy_j=energy_j, **fields)
    return r


def test_device_parallelism_names_the_counts_that_minimise_each():
    # 1 GPU: 100 img/s at 1000 J per 10 s; 2 GPUs: 190 img/s, 2500 J; 4: 300 img/s, 7000 J.
    runs = [run("a", 1, 100.0, 1000.0), run("b", 2, 190.0, 2500.0), run("c", 4, 300.0, 7000.0)]
    cells = aggregate(runs, None, 0.05)
    tables, notes, series = scaling.parallelism(cells, {"images/s": 1e6})
    [table] = tables
    assert [row[0].text for row in table.rows] == ["1", "2", "4"]
    times = [row[2].value for row in table.rows]
    assert times == [1e6 / 100, 1e6 / 190, 1e6 / 300]
    energies = [row[4].value for row in table.rows]  # kJ: work / (units per joule)
    assert energies == [1e6 / 1 / 1e3, 1e6 / (1900 / 2500) / 1e3, 1e6 / (3000 / 7000) / 1e3]
    # Fastest with 4 GPUs, least energy with 1; Action (J x s): 1: 1e10, 2: 6.9e9, 4: 7.8e9.
    assert "time-to-solution is least with 4 GPU(s)" in notes[0]
    assert "energy-to-solution is least with 1 GPU(s)" in notes[0]
    assert "Action (E × T) is least with 2 GPU(s)" in notes[0]


def test_node_scaling_sums_node_results_and_divides_by_n_times_one_node():
    one = run("j-1n", 1, 100.0, slurm_job="7", nodes=1, scaling="strong")
    two = [run("j-2n", 1, 90.0, slurm_job="7", nodes=2, scaling="strong"),
           run("j-2n", 1, 80.0, slurm_job="7", nodes=2, scaling="strong")]
    tables, series = scaling.node_scaling([one, *two])
    [table] = tables
    assert "strong scaling" in table.title
    assert [row[2].value for row in table.rows] == [100.0, 170.0]
    assert table.rows[1][4].value == 170.0 / (2 * 100.0)
    # A run missing one of its nodes is no point of the curve.
    tables, _ = scaling.node_scaling([one, two[0]])
    assert tables == []


def test_runtime_split_lists_only_runs_that_read_from_storage():
    stored = run("s", 1, 50.0, input={"data_wait_share": 0.25, "data_wait_s": 1.0,
                                       "compute_s": 3.0, "read_bandwidth_node_bytes_per_s": 2e6,
                                       "samples": 40, "bytes": 800000, "workers": 1})
    table = scaling.split_table([stored, run("p", 1, 60.0)])
    [row] = table.rows
    assert row[6].value == 0.25 and row[9].value == 2.0 and row[5].value == 50.0
    assert scaling.split_table([run("p", 1, 60.0)]) is None
