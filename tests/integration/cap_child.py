"""Child process for test_power_signals.py: hold a 300 W cap on every GPU.

Run with PYTHONPATH=tests/fakes and HPCAI_FAKE_GPU_STATE set, so the real
nvml backend talks to the fake pynvml. Prints READY once the cap is on,
then sleeps until a signal ends it. Argument: the journal path.
"""
import sys
import time

from hpcai.errors import HpcaiError
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.session import CapSession
from hpcai.signals import install_signal_handlers


def main(journal: str) -> int:
    def forward(signum):  # the launcher would forward to its workload here
        print(f"GOT {signum}", flush=True)

    try:
        with make_backend("nvml", "nvidia") as backend:
            with install_signal_handlers(callback=forward):
                with CapSession(backend, 300.0, None, journal):
                    print("READY", flush=True)
                    while True:
                        time.sleep(0.05)
    except HpcaiError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
