"""--slurm where Slurm is installed but no controller answers (a fresh login
node, a controller down): Debian's real sbatch, pointed by SLURM_CONF at a
controller port where nothing listens, says so; the launcher says the
controller cannot be reached and points at nothing it has deleted."""
import shutil
import socket

import pytest

from conftest import one_line_error

pytestmark = [pytest.mark.slurm, pytest.mark.system]


def _closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there now
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_controller_is_said_and_nothing_is_left(cpu_node, tmp_path):
    if not shutil.which("sbatch"):
        pytest.fail("sbatch is not installed: run `make setup-system` (slurm-wlm)")
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort={_closed_port()}\n"
                    "AuthType=auth/munge\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
                    "PartitionName=debug Nodes=localhost Default=YES\n")
    cpu_node.env["SLURM_CONF"] = str(conf)
    results = tmp_path / "results"
    done = cpu_node.launch("resnet50", "--preset", "tiny", "--slurm", "-o", str(results), timeout=120)
    one_line_error(done, "the Slurm controller cannot be reached", "nothing was submitted",
                          "scontrol ping")
    assert "Unable to contact slurm controller" in done.stderr
    assert not list(results.glob("slurm-*"))  # the job folder is gone...
    assert str(results) not in done.stderr  # ...and nothing points into it
