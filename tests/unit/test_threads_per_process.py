"""CPU workers share the cores: each of a node's processes gets usable cores /
processes threads (at least one), the launcher's OMP_NUM_THREADS and the workload's
torch.set_num_threads alike, and the result records it (config.threads_per_process)."""
import os

import pytest

from hpcai import provenance
from hpcai.launcher.run.runtime import child_environment


@pytest.mark.parametrize("cores,slurm,processes,want", [
    (2, None, 2, 1), (2, None, 1, 2), (16, None, 4, 4), (16, "6", 2, 3), (3, None, 4, 1), (8, None, 3, 2),
])
def test_each_process_gets_its_share_of_the_usable_cores(monkeypatch, cores, slurm, processes, want):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    if slurm:
        monkeypatch.setenv("SLURM_CPUS_ON_NODE", slurm)
    else:
        monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert provenance.threads_per_process(processes) == want
    env = child_environment(None, None, "cpu", processes)
    assert env["OMP_NUM_THREADS"] == str(want)


def test_the_result_schema_describes_the_share(result_schema):
    field = result_schema["properties"]["config"]["properties"]["threads_per_process"]
    assert field["type"] == "integer" and field["minimum"] == 1
