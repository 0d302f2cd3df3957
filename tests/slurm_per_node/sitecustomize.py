"""Test harness, not a fake: one simulated GPU node per Slurm node.

The CI cluster's two Slurm nodes (tools/slurm-ci) are this one machine, so
without help both would see one FAKE GPU state file and share one power
journal folder, where a real cluster has GPUs and local state per node. With
this folder on PYTHONPATH every Python sets HPCAI_FAKE_GPU_STATE and
HPCAI_STATE_DIR from the templates below, `{node}` replaced by its Slurm node's
name (SLURMD_NODENAME, which slurmd sets in each task; "login" outside a job).
The templates themselves pass unchanged through sbatch and srun to every node.
"""
import os

_node = os.environ.get("SLURMD_NODENAME") or "login"
for _var in ("HPCAI_FAKE_GPU_STATE", "HPCAI_STATE_DIR"):
    _template = os.environ.get(f"{_var}_PER_NODE")
    if _template:
        os.environ[_var] = _template.replace("{node}", _node)
