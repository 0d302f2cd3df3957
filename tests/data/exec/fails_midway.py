"""A program that works for a while, then fails (an exception, exit status 1)."""
import time

for step in range(3):
    print(f"step {step}", flush=True)
    time.sleep(0.2)
raise RuntimeError("the solver diverged at step 3")
