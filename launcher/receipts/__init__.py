"""Per-job energy receipts (issue 44 §1): what each Slurm job's GPUs used, under
which cap and clocks, and who set them.

`hpcai-job-receipt start|end` runs as root from the Slurm prolog and epilog
(docs/how-to/job-receipts.md): slurm.py asks Slurm about the job, gpus.py reads
its GPUs, spool.py writes the receipt into a root-owned spool; store.py ingests
the spool into the results store (`hpcai-launch results jobs`), mix.py turns
measured GPU-hours per class into the planner's job mix.
"""
