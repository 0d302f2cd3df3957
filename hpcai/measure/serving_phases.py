"""Serving: energy and time split into prefill and decode, from the per-request
time stamps SGLang's client measured (send time, time to first token,
latency; workloads/sglang_client.py).

Request i is in prefill from its send time until its first token, and in
decode from then until it completes. Over the load, time is prefill time
where any request waits for its first token (the engine runs a prefill batch
then, and decode steps of other requests share those seconds), and decode
time where requests are decoding and none is in prefill. The node's GPU
power integrated over each set of intervals is that phase's energy; prefill
energy per input token and decode energy per output token follow. A cap or a
clock that changes one phase shows there: decode is memory-bound and draws
far less than the limit (arXiv 2605.11999).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, non-overlapping intervals covering the same time."""
    out: list[list[float]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def subtract(intervals: list, cut: list) -> list[tuple[float, float]]:
    """intervals minus cut (both unions)."""
    out = []
    for a, b in intervals:
        pieces = [(a, b)]
        for c, d in cut:
            pieces = [p for x, y in pieces for p in ((x, min(y, c)), (max(x, d), y)) if p[1] > p[0]]
        out.extend(pieces)
    return out


def phase_intervals(requests: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """{"prefill": [...], "decode": [...]} in the requests' clock; only
    requests that succeeded."""
    done = [r for r in requests if r.get("success", True)]
    prefill = union([(r["start"], r["start"] + r["ttft"]) for r in done])
    decoding = union([(r["start"] + r["ttft"], r["start"] + r["latency"]) for r in done])
    return {"prefill": prefill, "decode": subtract(decoding, prefill)}


def power_timeline(sampler, sources: list[int]) -> tuple[list[float], list[float]]:
    """Ticks where every given source read power, and their summed power (W)."""
    times, powers = [], []
    for t, row in zip(sampler.times, sampler.readings):
        got = [row[i].power_w if row[i] is not None else None for i in sources]
        if got and all(p is not None for p in got):
            times.append(t)
            powers.append(sum(got))
    return times, powers


def _power_at(times, powers, t):
    k = bisect_left(times, t)
    if k < len(times) and times[k] == t:
        return powers[k]
    t0, t1 = times[k - 1], times[k]
    return powers[k - 1] + (powers[k] - powers[k - 1]) * (t - t0) / (t1 - t0)


def energy_over(times: list[float], powers: list[float], a: float, b: float) -> float | None:
    """Trapezoidal energy (J) of the piecewise-linear power over [a, b];
    None where the samples do not cover it."""
    if len(times) < 2 or a < times[0] or b > times[-1]:
        return None
    inner = range(bisect_right(times, a), bisect_left(times, b))
    points = [(a, _power_at(times, powers, a))] + [(times[k], powers[k]) for k in inner] \
        + [(b, _power_at(times, powers, b))]
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def used_sources(spec: dict, discovery) -> list[int]:
    """The sampler's indices of the run's GPUs (or CPU packages), as phase_energy picks them."""
    if discovery is None:
        return []
    used = spec["devices"].get("gpu_indices")
    if discovery.kind == "gpu":
        return [i for i, d in enumerate(discovery.gpus) if used is None or d.info().index in used]
    return list(range(len(discovery.rapl))) if discovery.kind == "rapl" else []


def split(sampler, sources: list[int], requests: list[dict], input_tokens: int | None,
          output_tokens: int | None) -> dict:
    """workload_metrics.serving_phases: per phase its time, energy and mean
    power, J per input token (prefill) and per output token (decode)."""
    times, powers = power_timeline(sampler, sources) if sampler is not None else ([], [])
    out = {"basis": ("prefill: any request waiting for its first token; decode: requests "
                     "decoding and none in prefill; from the client's per-request send time, "
                     "ttft and latency; energy: the run's GPUs' power integrated over each")}
    for name, spans in phase_intervals(requests).items():
        duration = sum(b - a for a, b in spans)
        parts = [energy_over(times, powers, a, b) for a, b in spans]
        energy = sum(parts) if parts and all(p is not None for p in parts) else None
        out[name] = {"intervals": len(spans), "duration_s": duration, "energy_j": energy,
                     "mean_power_w": energy / duration if energy is not None and duration else None}
    pre, dec = out["prefill"]["energy_j"], out["decode"]["energy_j"]
    out["input_tokens"], out["output_tokens"] = input_tokens, output_tokens
    out["prefill"]["j_per_input_token"] = pre / input_tokens if pre is not None and input_tokens else None
    out["decode"]["j_per_output_token"] = dec / output_tokens if dec is not None and output_tokens else None
    return out
