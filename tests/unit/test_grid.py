"""`--vary` grids: parsing, the order of points with caps and repeats, and node
scaling under Slurm (one allocation, a step per node count, strong batches)."""
import subprocess

import pytest

from hpcai.errors import UsageError
from hpcai.launcher.sweep import grid
from hpcai.launcher.run.options import Options
from hpcai.launcher.slurm.job import Job, SlurmOptions, new_job_doc
from hpcai.launcher.slurm.scaling import strong_batches
from hpcai.launcher.slurm.script import render
from hpcai.launcher.slurm.submit import run_slots
from hpcai.launcher.sweep.slots import schedule
from hpcai.workloads.catalog import get_workload

RESNET = get_workload("resnet50")


def test_axes_parse_to_sorted_unique_values_and_form_a_grid():
    axes = grid.parse_vary(["gpus=4,1,2,2", "batch-size=64,32"], RESNET)
    assert axes == [("gpus", [1, 2, 4]), ("batch_size", [32, 64])]
    points = grid.points(axes)
    assert len(points) == 6 and points[0] == (("gpus", 1), ("batch_size", 32))
    assert grid.parse_vary(["model=tiny,short"], RESNET) == [("model", ["tiny", "short"])]


@pytest.mark.parametrize("text,match", [
    ("colour=1", "has no parameter 'colour'"), ("gpus=", "has no values"),
    ("gpus", "needs PARAM=V1,V2"), ("gpus=0", "must be at least 1"),
    ("model=huge", "no size or preset 'huge'"), ("cube=64,128", "has no parameter 'cube'"),
])
def test_bad_axes_are_usage_errors(text, match):
    with pytest.raises(UsageError, match=match):
        grid.parse_vary([text], RESNET)


def test_a_point_sets_processes_on_cpu_and_gpus_on_gpus():
    opts = Options("resnet50", preset="tiny", params={"batch_size": None})
    point = (("gpus", 2), ("batch_size", 8), ("image_size", 96))
    on_cpu = grid.apply(opts, point, "cpu")
    assert (on_cpu.nproc, on_cpu.gpus, on_cpu.params["batch_size"]) == (2, None, 8)
    assert on_cpu.params["image_size"] == 96 and opts.params == {"batch_size": None}
    on_gpu = grid.apply(opts, point, "cuda")
    assert (on_gpu.nproc, on_gpu.gpus) == (None, 2)
    assert grid.apply(opts, (("model", "short"),)).preset == "short"


def test_every_point_and_cap_once_per_round_and_a_plain_cap_sweep_unchanged():
    points = grid.points([("gpus", [1, 2])])
    slots = schedule([200.0, 300.0], 2, "shuffle", 11, points=points)
    for r in (0, 1):
        assert sorted((s.point, s.cap_w) for s in slots if s.repeat == r) == sorted(
            (p, c) for p in points for c in (200.0, 300.0))
    plain = [(s.cap_w, s.repeat) for s in schedule([200.0, 300.0, 400.0], 2, "shuffle", 11)]
    assert plain == [(s.cap_w, s.repeat) for s in schedule([200.0, 300.0, 400.0], 2, "shuffle", 11, points=[()])]
    alternate = schedule([None], 1, "alternate", 0, points=grid.points([("batch_size", [2, 4, 8])]))
    assert [s.point[0][1] for s in alternate] == [2, 8, 4]


def node_job(tmp_path, scaling, batch=8, nproc=2):
    opts = Options("resnet50", preset="tiny", device="cpu", nproc=nproc, vary=[("nodes", [1, 2, 4])],
                   scaling=scaling, seed=3, params={"batch_size": batch}, slurm=SlurmOptions(nodes=4))
    slurm = SlurmOptions(nodes=4)
    batches = strong_batches(opts, slurm, {}) if scaling == "strong" else None
    runs, seed = run_slots(opts, 4, batches=batches)
    return Job(tmp_path / "job", new_job_doc(opts, slurm, runs, ["hpcai-launch", "x"], seed))


def test_node_scaling_runs_each_count_as_its_own_step(tmp_path):
    job = node_job(tmp_path, "weak")
    assert sorted(r.nodes for r in job.runs) == [1, 2, 4]
    assert all(r.run_id.endswith(f"-{r.nodes}n-{r.index:03d}") for r in job.runs)
    script = render(job)
    assert "#SBATCH --nodes=4\n" in script  # the allocation: the most nodes
    steps = " ".join(str(r.nodes) for r in job.runs)
    assert f"STEP_NODES=({steps})" in script
    assert 'srun --nodes="${2:-$SLURM_JOB_NUM_NODES}" --ntasks="${2:-$SLURM_JOB_NUM_NODES}"' in script
    assert 'run "$index" "${STEP_NODES[$index]}"' in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # Weak: every run keeps the batch per process.
    for slot in job.runs:
        opts = job.slot_options(slot, "cpu")
        assert opts.params["batch_size"] == 8 and opts.vary is None and not opts.is_sweep


def test_strong_scaling_keeps_the_global_batch(tmp_path):
    job = node_job(tmp_path, "strong", batch=8, nproc=2)  # global: 8 x 2 processes x 1 node
    for slot in job.runs:
        batch = job.slot_options(slot, "cpu").params["batch_size"]
        assert batch * 2 * slot.nodes == 16
    with pytest.raises(UsageError, match=r"global batch 2 does not split evenly over 2 node\(s\) x 2"):
        node_job(tmp_path, "strong", batch=1, nproc=2)
