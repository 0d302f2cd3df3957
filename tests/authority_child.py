"""A capped "launcher" for the cap-authority tests: a real process holding a
CapSession on the FAKE GPUs (PYTHONPATH=tests/fakes, HPCAI_FAKE_GPU_STATE set).

    python tests/authority_child.py JOURNAL CAP_W INDICES [WAIT_S] [RUN_ID]

INDICES: comma-separated GPU indices, or "all". Prints READY once the cap is
on, then holds it until SIGTERM (restores) or SIGKILL (restores nothing).
An HpcaiError is printed as the CLI would (one line) with its exit code.
"""
import sys
import time

from hpcai.errors import HpcaiError
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.session import CapSession
from hpcai.signals import install_signal_handlers


def main(journal: str, cap: str, indices: str, wait_s: str = "0", run_id: str = "child") -> int:
    gpus = None if indices == "all" else [int(i) for i in indices.split(",")]
    try:
        with make_backend("nvml", "nvidia") as backend:
            with install_signal_handlers():
                with CapSession(backend, float(cap), gpus, journal, run_id=run_id, wait_s=float(wait_s)):
                    print("READY", flush=True)
                    while True:
                        time.sleep(0.05)
    except HpcaiError as exc:
        print(f"hpcai-launch: {exc.one_line()}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
