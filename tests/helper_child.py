"""hpcai-power-helper's two paths, as root on the FAKE GPUs (PYTHONPATH=tests/fakes,
HPCAI_FAKE_GPU_STATE set), for the fault-injection loop:

    python tests/helper_child.py set UUID WATTS JOB_STATE_FILE [ANSWER_S]   # a user's cap for job 40402
    python tests/helper_child.py restore                         # the epilog's restore --job 40402

Slurm's answer to the helper's one question (which running job of the caller
holds this GPU: helper.caller_job_holding) is the stub: a file holding the job's
state, RUNNING until the test ends the job, read when asked; the answer arrives
ANSWER_S later (a loaded slurmctld answers in seconds: the job may end meanwhile).
Errors print as the helper's one line.
"""
import sys
import time
from pathlib import Path

from hpcai.errors import HpcaiError, PowerError
from hpcai.launcher.power import helper

JOB, UID = "40402", 1001


def main(action: str, *args: str) -> int:
    try:
        if action == "set":
            uuid, watts, state, *answer_s = args

            def caller_job_holding(config, uid, index):
                running = Path(state).read_text().strip() == "RUNNING"
                time.sleep(float(answer_s[0]) if answer_s else 0.0)
                if not running:
                    raise PowerError(f"user {uid} has no running Slurm job on this node holding GPU {index}")
                return JOB

            helper.caller_job_holding = caller_job_holding
            print(helper.set_limit(uuid, float(watts), UID, {}))
        else:
            for line in helper.restore_job(JOB, None, {}):
                print(line)
        return 0
    except HpcaiError as exc:
        print(f"hpcai-power-helper: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
