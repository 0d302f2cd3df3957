"""hpcai.measure run alone: the measuring process beside a Python program.

hpcai/measure/api.py starts `python -m hpcai.workloads.measure_alone --pid P
--events F --ready R --output DIR` at the program's first window. This plans a
run of the `exec` workload as `hpcai-launch exec` would (the site, the GPUs,
node power; no cap: a program measuring itself sets no limits), attached to
the program instead of starting a command, and runs the same entrypoint: the
same telemetry and result document. It says it is sampling by writing the run
folder into the ready file, and ends when the program writes its end event
(at exit) or is gone.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from hpcai.safe_files import Folder

POLL_S = 0.1
# The ready file's path, for the engine (this module runs as __main__ and is
# imported again by the engine: an environment variable is what both see).
READY_ENV = "HPCAI_MEASURE_READY"


def say_ready(run_dir: Path) -> None:
    """The sampler runs: the program may open its window (atomically: no half a path)."""
    ready = os.environ.get(READY_ENV)
    if not ready:
        return
    ready = Path(ready)
    with Folder.open(ready.parent) as folder:
        folder.write_text(ready.name, str(run_dir))


def wait_for_end(pid: int, events: Path) -> bool:
    """True when the program wrote its end event; False when it is gone without one."""
    while True:
        if _has_end(events):
            return True
        if not _alive(pid):
            return _has_end(events)
        time.sleep(POLL_S)


def _has_end(events: Path) -> bool:
    try:
        with open(events, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return False
    return '"event": "end"' in tail


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        return [w for w in Path(f"/proc/{pid}/cmdline").read_bytes().decode(
            "utf-8", "replace").split("\0") if w]
    except OSError:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcai.workloads.measure_alone")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    os.environ[READY_ENV] = args.ready

    from hpcai.errors import HpcaiError
    from hpcai.launcher.run.options import Options
    from hpcai.launcher.run.plan import make_plan
    from hpcai.workloads.entrypoint import Run

    try:
        cwd = os.readlink(f"/proc/{args.pid}/cwd")
    except OSError:
        cwd = None
    opts = Options(workload="exec", output=args.output, runtime="host",
                   params={"api": True, "attach_pid": args.pid, "events": args.events,
                           "command": _cmdline(args.pid), "cwd": cwd})
    try:
        spec = make_plan(opts).spec
        run_dir = Path(spec.output_dir)
        run_dir.mkdir(parents=True, exist_ok=False)
        (run_dir / "spec.json").write_text(json.dumps(spec.to_json(), indent=2) + "\n")
    except (HpcaiError, OSError) as exc:
        text = exc.one_line() if isinstance(exc, HpcaiError) else str(exc)
        print(f"hpcai.measure: error: {text}", file=sys.stderr)
        return 2
    code = Run(spec, run_dir).execute()
    print(f"hpcai.measure: result: {run_dir / 'result.json'}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
