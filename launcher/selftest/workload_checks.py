"""Each installed workload for a short run on one GPU, through the same
`hpcai-launch WORKLOAD` path as a benchmark (its default preset, a few steps)."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from hpcai.launcher.run.runtime import EXTRAS
from hpcai.launcher.selftest.base import Check, Context
from hpcai.workloads.catalog import WORKLOADS
from hpcai.install import install_hint

STEPS = 10
RUN_TIMEOUT_S = 300


def workload_items(names: list[str] | None) -> list[tuple]:
    """(workload, impl name, impl) for every implementation, or those named."""
    items = [(w, name, impl) for w in WORKLOADS.values() for name, impl in w.impls.items()]
    if names:
        items = [it for it in items if it[0].name in names or f"{it[0].name}:{it[1]}" in names]
    return items


def _run(ctx: Context, workload, impl_name: str, out: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hpcai.launcher.cli", workload.name, "--impl", impl_name,
            "--gpus", "1", "--warmup-epochs", "1", "--epochs", "1", "--steps-per-epoch", str(STEPS),
            "-o", str(out)]
    if ctx.site.get("path"):
        argv += ["--site", str(ctx.site["path"])]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGTERM)  # the launcher stops its workload in order
        stdout, stderr = child.communicate()
        stderr += f"\ntimed out after {RUN_TIMEOUT_S} s"
    return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)


def check_workloads(ctx: Context, names: list[str] | None = None) -> list[Check]:
    rows = []
    for workload, impl_name, impl in workload_items(names):
        item = f"{workload.name} ({impl_name})"
        if importlib.util.find_spec(impl.framework) is None:
            extra = EXTRAS.get(impl.framework, "cv")
            rows.append(Check("workloads", item, "skipped",
                              f"{impl.framework} is not installed ({install_hint(extra)})"))
            continue
        if not ctx.gpus:
            rows.append(Check("workloads", item, "skipped", "no GPU: the short runs are on a GPU"))
            continue
        with tempfile.TemporaryDirectory(prefix="hpcai-selftest-") as tmp:
            done = _run(ctx, workload, impl_name, Path(tmp))
            results = sorted(Path(tmp).glob("*/result.json"))
            doc = json.loads(results[0].read_text()) if results else None
        if done.returncode != 0 or doc is None or doc.get("status") != "complete":
            lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
            rows.append(Check("workloads", item, "FAIL", lines[-1] if lines else f"exit code {done.returncode}"))
            continue
        tp = doc["throughput"]
        value = f"{tp['node']:.1f} {tp['unit']}"
        if tp.get("achieved_tflops_node") is not None:
            value += f", {tp['achieved_tflops_node']:.1f} TFLOP/s"
        if tp.get("fraction_of_peak") is not None:
            value += f" ({tp['fraction_of_peak']:.0%} of peak)"
        rows.append(Check("workloads", item, "ok", value + f", {STEPS} steps, preset {doc['spec']['preset']}",
                          {"throughput": tp, "preset": doc["spec"]["preset"]}))
    return rows
