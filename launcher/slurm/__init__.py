"""Slurm: benchmarks and cap sweeps as batch jobs, one launcher per node.

`hpcai-launch WORKLOAD --slurm` writes a job folder under the results folder
(job.json, the batch script, Slurm's log) and submits it with sbatch. Inside
the job, every run is one `srun` step with one task per node: each node's
launcher caps its own GPUs, starts torchrun with a c10d rendezvous at the
first node, writes its node's result and restores its caps; then the batch
script writes the run's aggregate (total throughput, scaling efficiency).
"""
