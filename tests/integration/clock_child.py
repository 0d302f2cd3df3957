"""Child process for test_clock_caps_e2e.py: hold a 300 W cap and SM clock cap
(and, on AMD, a memory clock cap) on every GPU of a FAKE node.

Run with PYTHONPATH=tests/fakes and HPCAI_FAKE_GPU_STATE set, so the real
nvml/amdsmi backends talk to the fake libraries. Prints READY once caps and
clocks are on, then sleeps until a signal ends it.
Arguments: the power journal path, the vendor ("nvidia" | "amd"), the SM clock.
"""
import sys
import time

from hpcai.errors import HpcaiError
from hpcai.launcher.power.backends import make_backend
from hpcai.launcher.power.clocks import ClockSession
from hpcai.launcher.power.session import CapSession
from hpcai.signals import install_signal_handlers


def main(journal: str, vendor: str, sm_mhz: str) -> int:
    def forward(signum):  # the launcher would forward to its workload here
        print(f"GOT {signum}", flush=True)

    method = "nvml" if vendor == "nvidia" else "amdsmi"
    mem = None if vendor == "nvidia" else 1100
    try:
        with make_backend(method, vendor) as backend:
            indices = [g.index for g in backend.gpus()]
            with install_signal_handlers(callback=forward):
                # As launcher/run/process.py (WorkloadProcess._hold_limits): the cap first, the clocks inside it.
                with CapSession(backend, 300.0, indices, journal):
                    with ClockSession(backend, int(sm_mhz), mem, indices, journal):
                        print("READY", flush=True)
                        while True:
                            time.sleep(0.05)
    except HpcaiError as exc:
        print(exc.one_line(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
