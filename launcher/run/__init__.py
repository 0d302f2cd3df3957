"""One run: its options and spec, the plan, the process and its container,
lifeline and stall watch, the workload log, the output check and the result
document. `launch.py` is the entry of every launch mode."""
