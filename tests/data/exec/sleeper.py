"""A long program with a child of its own: writes both pids to argv[1], then waits."""
import os
import subprocess
import sys
import time

child = subprocess.Popen(["sleep", "600"])
with open(sys.argv[1] + ".partial", "w") as handle:
    handle.write(f"{os.getpid()} {child.pid}\n")
os.replace(sys.argv[1] + ".partial", sys.argv[1])
print("sleeping", flush=True)
time.sleep(600)
