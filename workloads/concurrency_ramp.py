"""The concurrency that saturates the server, measured, not fixed (SGLang `fast`).

Before the measured load, one short wave of SGLang's benchmark client per
probed concurrency (e.g. 64, 128, 256 requests in flight, as many requests
as in flight); the smallest concurrency whose output tokens/s is within
TOLERANCE of the best probe's is kept: more requests in flight beyond it only
lengthen every request's latency for no throughput. Each probe's figures go
into the result (config.concurrency_ramp).
"""
from __future__ import annotations

from hpcai.errors import UsageError

TOLERANCE = 0.03  # within 3% of the best output tokens/s counts as saturated


def parse(text: str | None) -> tuple[int, ...]:
    """'64,128,256' -> (64, 128, 256); None, '' or 'off' -> () (no ramp)."""
    if text is None or str(text).strip().lower() in ("", "off"):
        return ()
    hint = "give requests in flight as a comma-separated list, e.g. 64,128,256, or off"
    try:
        values = tuple(int(part) for part in str(text).split(","))
    except ValueError:
        raise UsageError(f"--concurrency-ramp {text!r} is not a list of whole numbers", hint) from None
    if any(v < 1 for v in values):
        raise UsageError(f"--concurrency-ramp {text!r} has a concurrency below 1", hint)
    if len(set(values)) != len(values):
        raise UsageError(f"--concurrency-ramp {text!r} repeats a concurrency", hint)
    return tuple(sorted(values))


def skipped_because(ramp: tuple[int, ...], overridden, request_rate: float) -> str | None:
    """Why the ramp does not run (None: it runs)."""
    if not ramp:
        return "no --concurrency-ramp"
    if "batch_size" in overridden:
        return "--batch-size given: its concurrency is kept"
    if request_rate != float("inf"):
        return "--request-rate given: the arrival rate, not the concurrency, sets the load"
    return None


def choose(probes: list[dict], tolerance: float = TOLERANCE) -> int:
    """The smallest probed concurrency within `tolerance` of the best output tokens/s."""
    measured = [p for p in probes if p.get("output_tokens_per_s")]
    if not measured:
        raise ValueError("no probe measured any output")
    best = max(p["output_tokens_per_s"] for p in measured)
    return min(p["concurrency"] for p in measured
               if p["output_tokens_per_s"] >= (1 - tolerance) * best)


def record(probes: list[dict], chosen: int, tolerance: float = TOLERANCE) -> dict:
    best = max(probes, key=lambda p: p.get("output_tokens_per_s") or 0)
    return {"probed": [p["concurrency"] for p in probes], "chosen": chosen,
            "best": best["concurrency"], "tolerance": tolerance,
            "rule": f"the smallest concurrency within {tolerance:.0%} of the best output tokens/s",
            "probes": probes}


def probe_figures(concurrency: int, bench: dict, folder: str) -> dict:
    """One probe's figures, from SGLang's client result (its own keys)."""
    return {"concurrency": concurrency, "requests": int(bench.get("completed", 0)),
            "duration_s": bench.get("duration"),
            "output_tokens_per_s": bench.get("output_throughput"),
            "total_tokens_per_s": bench.get("total_throughput"),
            "output_tokens": bench.get("total_output_tokens"), "folder": folder}
