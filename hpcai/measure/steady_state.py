"""The serving steady state, from per-request timestamps of SGLang's own
benchmark client (pure: no I/O).

Steady state: from when the number of requests in flight first reaches the
target concurrency until the first request of the ramp-down completes. The
ramp-down begins when the last request has been sent: from then on no
request replaces one that completes, so the first completion after the last
start ends the steady state. Before it is the ramp-up, after it the
ramp-down; each gets its own energy (workloads/result.py phase_energy).

Per request, SGLang's client keeps `start_time` (time.perf_counter() when the
request is sent), `latency` (to its last chunk), `ttft` and `itl` (the gaps
between output tokens) in its RequestFuncOutput (sglang/benchmark/serving.py:
99-115 and async_request_sglang_generate, :657-782, in 0.5.19). Its output
file with --output-details keeps ttfts, itls and output_lens but not
start_time or latency (:1882-1903), so hpcai's client wrapper
(workloads/sglang_client.py) records those per request, the way SGLang's own
steady_state_serving.py captures its outputs (:75-99).

Output tokens in the window: each request's token timestamps (start + ttft,
then + each itl) inside the window, each worth output_len / timestamps (a
chunk of several tokens spread over them), as SGLang's own steady-state
metrics count them (sglang/benchmark/steady_state.py:121-159).
"""
from __future__ import annotations


def token_times(request: dict) -> list[float]:
    times = [request["start"] + request["ttft"]]
    for gap in request.get("itl") or []:
        times.append(times[-1] + gap)
    return times


def in_flight_peak(requests: list[dict]) -> int:
    level = peak = 0
    for _, step in _events(requests):
        level += step
        peak = max(peak, level)
    return peak


def _events(requests: list[dict]) -> list[tuple[float, int]]:
    events = []
    for r in requests:
        events.append((r["start"], +1))
        events.append((r["start"] + r["latency"], -1))
    # At one instant a completion frees its slot before a start takes it.
    return sorted(events, key=lambda e: (e[0], e[1]))


def steady_window(requests: list[dict], target: int) -> tuple[float, float] | str:
    """(start, end) of the steady state, or why there is none."""
    done = [r for r in requests if r.get("success") and r.get("latency", 0) > 0]
    if not done:
        return "no request completed"
    level, start = 0, None
    for t, step in _events(done):
        level += step
        if level >= target:
            start = t
            break
    if start is None:
        return (f"the requests in flight never reached the target concurrency {target} "
                f"(at most {in_flight_peak(done)})")
    last_start = max(r["start"] for r in done)
    ends = [r["start"] + r["latency"] for r in done if r["start"] + r["latency"] >= last_start]
    end = min(ends)
    if end <= start:
        return "the ramp-down began before the target concurrency was reached"
    return start, end


def output_tokens_between(requests: list[dict], t0: float, t1: float) -> float:
    total = 0.0
    for r in requests:
        if not r.get("success") or r.get("latency", 0) <= 0:
            continue
        times = token_times(r)
        inside = sum(1 for t in times if t0 <= t <= t1)
        total += r.get("output_len", len(times)) * inside / len(times)
    return total


def analyse(requests: list[dict], target: int) -> dict:
    """The steady state and the phases around it, times as given (wall seconds)."""
    done = [r for r in requests if r.get("success") and r.get("latency", 0) > 0]
    found = steady_window(requests, target)
    doc = {"target_concurrency": target, "peak_in_flight": in_flight_peak(done),
           "requests": len(requests), "completed": len(done)}
    if isinstance(found, str):
        return {**doc, "available": False, "reason": found}
    start, end = found
    first = min(r["start"] for r in done)
    last = max(r["start"] + r["latency"] for r in done)
    tokens = output_tokens_between(done, start, end)
    return {**doc, "available": True, "reason": None,
            "start": start, "end": end, "duration_s": end - start,
            "output_tokens": tokens, "output_tokens_per_s": tokens / (end - start),
            "completed_in_window": sum(1 for r in done if start <= r["start"] + r["latency"] <= end),
            "phases": {"ramp_up": {"start": first, "end": start},
                       "steady": {"start": start, "end": end},
                       "ramp_down": {"start": end, "end": last}}}
