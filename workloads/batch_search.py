"""`--batch-size auto`: the largest batch per device that runs a full step.

The seed paper trained with "the highest batch size that remains stable".

On a GPU it is found by trial. Each probe is one full training step
(forward, backward, optimizer) at a candidate batch size, and running out of
memory means that size does not fit. Probes double from the preset's batch
size until one fails (or halve until one fits), then bisect between the
largest that fitted and the smallest that did not, to a multiple of 8 (or to
1 below 8). Memory is freed after every failed probe. Sizes are capped at
GPU_MAX_BATCH.

A CPU has no out-of-memory error to catch: the kernel kills the process
instead. There the search models memory. It measures the peak resident
memory of one step at batches 1, 2 and 4 (after a warm-up step at 1), fits
peak = fixed + per_image x batch by least squares, and takes the largest batch
whose predicted peak stays within the process's budget. The allocator may serve
a step from memory an earlier one left resident, so a pass can measure no
growth at all: then the pass is repeated once, and if the slope is still not
positive the estimate is unusable, the result says so, and the preset's batch
size is kept (never the maximum: a zero slope says nothing about memory). The budget is its memory
now plus CPU_MEMORY_FRACTION of the memory available when the search starts,
shared among the processes on the node. The result is capped at
CPU_MAX_BATCH, because a CPU's throughput stops growing long before that and
a tiny model would otherwise get batches of thousands. The size found is not
tried first; the warm-up epoch is its first use.

On a GPU the largest is not the fastest: a preset other than `paper` (whose
rule is the seed paper's "highest batch that remains stable") then times the
largest, half and a quarter of it (multiples of 8) and keeps the smallest whose
throughput is within TOLERANCE of the best: it leaves memory headroom for the
compiled graph. The candidates are timed eagerly, as the search runs before
torch.compile (compiling each would cost minutes); the result says so.

A GPU's choice is cached per GPU model, workload and memory settings
(hpcai/batch_cache.py); a cached batch is used after one step shows it still
fits. The CPU's memory model is not cached: its budget is the memory free now.

The processes of one run agree. On GPUs a probe fits only if it fitted on
every process. On CPUs they take the smallest batch any of them found.
Everything the search did is returned for the result (config.batch_size_search).

Imports no framework at import time. A PyTorch workload plugs in through
torch_step_runner(); others pass their own run_step to find().
"""
from __future__ import annotations

import contextlib
import gc
import time
from pathlib import Path

from hpcai import batch_cache
from hpcai.errors import WorkloadError

GPU_MAX_BATCH = 4096
CPU_MAX_BATCH = 64
CPU_MEMORY_FRACTION = 0.5
MULTIPLE = 8

TRIAL_RULE = ("one full step per probe; double from the preset's batch size until out of memory "
              "(or halve until one fits), then bisect to a multiple of 8")
MODEL_RULE = (f"CPU: peak resident memory of one step measured at batch 1 and 2, extrapolated "
              f"linearly; the largest batch whose predicted peak fits the process's memory plus "
              f"{CPU_MEMORY_FRACTION:.0%} of the available memory shared among its processes, "
              f"capped at {CPU_MAX_BATCH}, rounded down to a multiple of {MULTIPLE}")
FALLBACK_RULE = ("CPU: peak resident memory cannot be measured here (/proc/self/clear_refs is "
                 "not writable), so the preset's batch size is kept")
UNUSABLE_RULE = ("CPU: the per-image memory measured was not positive in two passes (the "
                 "allocator reused resident memory), so the estimate is unusable and the "
                 "preset's batch size is kept")
TIMED_STEPS = 3
TOLERANCE = 0.02
THROUGHPUT_RULE = (f"then the largest, half and a quarter of it (multiples of {MULTIPLE}) timed eagerly, "
                   f"one warm-up and {TIMED_STEPS} timed steps each, the slowest process's time counting; "
                   f"the smallest within {TOLERANCE:.0%} of the best throughput is kept")
CACHED_RULE = ("the batch this GPU model, workload and memory settings chose before "
               "(hpcai/batch_cache.py), used after one step showed it still fits")
PROBE_SIZES = (1, 2, 4)
PASSES = 2


# ---- the two searches, free of any framework ----------------------------------


def search_by_trial(fits, start: int, maximum: int = GPU_MAX_BATCH,
                    multiple: int = MULTIPLE) -> int:
    """The largest n <= maximum with fits(n), assuming fits is monotone."""
    start = max(1, min(int(start), maximum))
    if fits(start):
        lo, hi = start, None
        while hi is None:
            if lo >= maximum:
                return lo
            n = min(2 * lo, maximum)
            if fits(n):
                lo = n
            else:
                hi = n
    else:
        lo, hi = None, start
        while lo is None:
            if hi == 1:
                raise WorkloadError("not even a batch of 1 fits in the device's memory",
                                    "use a smaller preset or a GPU with more memory")
            n = max(1, hi // 2)
            if fits(n):
                lo = n
            else:
                hi = n
    while True:
        step = multiple if lo >= multiple else 1
        mid = lo + ((hi - lo) // 2 // step) * step
        if mid <= lo:
            return lo
        if fits(mid):
            lo = mid
        else:
            hi = mid


def search_by_memory_model(step_peak_bytes, budget_bytes: int, maximum: int = CPU_MAX_BATCH,
                           multiple: int = MULTIPLE) -> dict:
    """The largest batch whose extrapolated peak memory fits budget_bytes.

    step_peak_bytes(n) runs one step at batch n and returns the process's
    peak resident memory during it. The result has usable=False (and a
    reason) when no pass measured memory growing with the batch."""
    step_peak_bytes(PROBE_SIZES[0])  # warm-up: optimizer state, kernel caches
    slopes = []
    for _ in range(PASSES):
        points = [(n, step_peak_bytes(n)) for n in PROBE_SIZES]
        per_image, fixed = _fit(points)
        slopes.append(per_image)
        if per_image > 0:
            break
    else:
        return {"usable": False, "per_image_bytes": max(slopes), "passes": len(slopes),
                "memory_budget_bytes": budget_bytes,
                "reason": (f"per-image memory measured as {max(slopes):.0f} bytes in "
                           f"{len(slopes)} passes at batches {list(PROBE_SIZES)}")}
    one = fixed + per_image
    predicted = int((budget_bytes - fixed) // per_image)
    if predicted < 1:
        raise WorkloadError(
            f"one image per step already needs {one / 2**30:.1f} GiB, over this process's "
            f"budget of {budget_bytes / 2**30:.1f} GiB",
            "free memory, run fewer processes (--nproc), or give --batch-size explicitly")
    found = min(predicted, maximum)
    if found >= multiple:
        found -= found % multiple
    return {"usable": True, "found": found, "predicted_max": predicted,
            "per_image_bytes": per_image, "fixed_bytes": fixed, "passes": len(slopes),
            "memory_budget_bytes": budget_bytes}


def _fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    """Least-squares line through (batch, peak bytes): (slope, intercept)."""
    mean_n = sum(n for n, _ in points) / len(points)
    mean_p = sum(p for _, p in points) / len(points)
    var = sum((n - mean_n) ** 2 for n, _ in points)
    slope = sum((n - mean_n) * (p - mean_p) for n, p in points) / var
    return round(slope), round(mean_p - slope * mean_n)  # whole bytes


# ---- the search a workload runs -------------------------------------------------


def _alone(value):
    return [value]


def candidates(largest: int, multiple: int = MULTIPLE) -> list[int]:
    """The largest, half and a quarter of it, rounded down to multiples (below
    one multiple: the largest alone)."""
    sizes = [largest]
    for n in (largest // 2, largest // 4):
        n -= n % multiple
        if n >= multiple and n not in sizes:
            sizes.append(n)
    return sizes


def pick_fastest(timings: list[dict], tolerance: float = TOLERANCE) -> int:
    """The smallest batch whose throughput is within tolerance of the best."""
    ran = [t for t in timings if t["fits"]]
    if not ran:
        raise WorkloadError("no candidate batch size ran its timed steps",
                            "give --batch-size explicitly")
    best = max(t["units_per_s"] for t in ran)
    return min(t["batch_size"] for t in ran if t["units_per_s"] >= (1 - tolerance) * best)


def measure_throughput(run_step, sizes: list[int], gather=_alone, clock=time.perf_counter) -> list[dict]:
    """One warm-up step (allocation, autotuning) then TIMED_STEPS timed steps per
    size; every process takes each decision, so the gathers stay in step."""
    timings = []
    for n in sizes:
        ok = all(gather(bool(run_step(n))))
        if not ok:
            timings.append({"batch_size": n, "fits": False})
            continue
        began = clock()
        for _ in range(TIMED_STEPS):
            ok = bool(run_step(n)) and ok
        seconds = max(gather(clock() - began))  # the slowest process sets the pace
        ok = all(gather(ok))
        timing = {"batch_size": n, "fits": ok, "seconds": seconds, "steps": TIMED_STEPS}
        if ok:
            timing["units_per_s"] = n * TIMED_STEPS / seconds if seconds > 0 else float("inf")
        timings.append(timing)
    return timings


def find(run_step, on_gpu: bool, start: int, gather=_alone, local_processes: int = 1, *,
         fastest: bool = False, cache=None, clock=time.perf_counter) -> dict:
    """Search with run_step(n) -> bool (one full step at batch n; False when it
    ran out of memory, with the memory already freed). gather(value) returns
    every process's value, so all processes take the same decisions. On a GPU,
    fastest: pick by measured throughput; cache: a hpcai.batch_cache.BatchCache."""
    began = clock()
    probes: list[dict] = []
    record = {"requested": "auto", "start": int(start), "multiple": MULTIPLE}
    if on_gpu:
        found = _find_on_gpu(run_step, start, gather, probes, record, fastest, cache, clock)
    elif not reset_peak_rss():
        found = int(start)
        record.update(method="fallback", rule=FALLBACK_RULE, maximum=None,
                      reason="/proc/self/clear_refs is not writable")
    else:
        found = _find_on_cpu(run_step, start, gather, probes, record, local_processes)
    record.update(found=found, probes=probes, seconds=clock() - began)
    return record


def _find_on_gpu(run_step, start, gather, probes, record, fastest, cache, clock) -> int:
    def fits(n: int) -> bool:
        t = clock()
        ok = all(gather(bool(run_step(n))))
        probes.append({"batch_size": n, "fits": ok, "seconds": clock() - t})
        return ok

    cached = _cached_batch(cache, gather, fits, record)
    if cached:
        return cached
    found = largest = search_by_trial(fits, start)
    record.update(method="trial", rule=TRIAL_RULE, maximum=GPU_MAX_BATCH, largest=largest)
    if fastest:
        timings = measure_throughput(run_step, candidates(largest), gather, clock)
        found = pick_fastest(timings)
        record.update(method="trial+throughput", rule=f"{TRIAL_RULE}; {THROUGHPUT_RULE}",
                      timings=timings, timed="eager")
    if cache is not None:
        not_stored = cache.store(found, record["method"])
        record["cache"].update(stored=not_stored is None)
        if not_stored:
            record["cache"]["not_stored"] = not_stored
    return found


def _cached_batch(cache, gather, fits, record) -> int:
    """The cached batch once one step showed it still fits on every process, else 0."""
    if cache is None:
        return 0
    entry, why = cache.lookup()
    size = int(entry["batch_size"]) if entry else 0
    info = record["cache"] = {"key": cache.key, "used": False}
    if not size or any(other != size for other in gather(size)):
        info["note"] = why or "the processes' cached batch sizes differ"
        return 0
    if not fits(size):
        info["note"] = f"the cached batch {size} no longer fits: searched afresh"
        return 0
    info.update(used=True, found_at=entry.get("found_at"), found_by=entry.get("method"))
    record.update(method="cached", rule=CACHED_RULE, maximum=GPU_MAX_BATCH)
    return size


def _find_on_cpu(run_step, start, gather, probes, record, local_processes) -> int:
    """The memory model, every process deciding together."""
    def step_peak_bytes(n: int) -> int:
        reset_peak_rss()
        t = time.perf_counter()
        if not run_step(n):
            raise WorkloadError(f"a probe step at batch {n} failed on the CPU",
                                "give --batch-size explicitly")
        peak = peak_rss_bytes()
        probes.append({"batch_size": n, "fits": True, "seconds": time.perf_counter() - t,
                       "peak_rss_bytes": peak})
        return peak

    budget = (current_rss_bytes()
              + int(CPU_MEMORY_FRACTION * available_memory_bytes() / max(1, local_processes)))
    error, model = None, {"found": 0, "usable": True}
    try:
        model = search_by_memory_model(step_peak_bytes, budget)
    except WorkloadError as exc:
        error = exc
    # Every process gets here, even one that failed; they decide together.
    if any(gather(error is not None)):
        raise error or WorkloadError("another process found no batch size that fits",
                                     "see its error above")
    usable = all(gather(bool(model["usable"])))
    found = min(gather(int(model.get("found", start))))
    if usable:
        record.update(model, method="memory-model", rule=MODEL_RULE, maximum=CPU_MAX_BATCH)
        return found
    reason = model.get("reason") or "another process measured no per-image memory"
    record.update(model, method="fallback", rule=UNUSABLE_RULE, maximum=None,
                  reason=reason, usable=False)
    return int(start)


# ---- PyTorch --------------------------------------------------------------------

_OOM_MARKERS = ("out of memory", "CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED",
                "HIPBLAS_STATUS_ALLOC_FAILED")


def is_torch_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MARKERS)


def torch_step_runner(trainer, ctx):
    """run_step for find(), for a trainer with set_batch_size(n), step(),
    latest_loss(), no_sync() and reset_training_state()."""
    import torch

    def run_step(n: int) -> bool:
        ok = True
        try:
            # A GPU's timed steps reuse the inputs; the CPU's memory model counts making them.
            if trainer.batch_size != n or ctx.device_type != "cuda":
                trainer.set_batch_size(n)
            with trainer.no_sync():
                trainer.step()
            trainer.latest_loss()  # waits for the device: late errors surface here
        except Exception as exc:  # re-raised unless out of memory
            if not is_torch_oom(exc):
                raise
            ok = False
        if not ok:  # outside the handler, so the traceback no longer holds tensors
            trainer.set_batch_size(None)
            trainer.reset_training_state()
            gc.collect()
            if ctx.device_type == "cuda":
                torch.cuda.empty_cache()
        return ok

    return run_step


def find_for_torch(trainer, ctx, start: int) -> dict:
    """Search, then leave the trainer as if freshly built at the size found.
    The trainer keeps its learning rate at 0 meanwhile, so probes do all of a
    step's work but change no weight, and the processes' weights stay equal."""
    import torch

    from hpcai.workloads import distributed

    fastest = picks_fastest(trainer.spec)
    cache = torch_batch_cache(trainer, ctx, fastest)
    record = find(torch_step_runner(trainer, ctx), ctx.device_type == "cuda", start,
                  gather=lambda value: distributed.gather(ctx, value),
                  local_processes=ctx.local_world_size, fastest=fastest, cache=cache)
    note_cache_off(record, ctx.device_type == "cuda", cache)
    trainer.set_batch_size(None)
    trainer.reset_training_state()
    gc.collect()
    if ctx.device_type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(ctx.device)
    trainer.set_batch_size(record["found"])
    return record


def picks_fastest(spec: dict) -> bool:
    """Every preset but `paper` keeps the fastest batch; the paper's rule is the largest."""
    return spec.get("preset_kind") != "paper"


def gpu_batch_cache(spec: dict, device: str, memory_bytes: int | None, framework: str,
                    fastest: bool, writer: bool, **settings):
    """The cache entry for this GPU model, workload and settings (the pick, fastest
    or largest, and each framework's own memory-relevant `settings` count too);
    None when HPCAI_BATCH_CACHE=off."""
    if not batch_cache.enabled():
        return None
    params = {**spec["params"], **settings, "pick": "fastest" if fastest else "largest"}
    description = batch_cache.describe_key(device, memory_bytes, spec["workload"], framework, params)
    return batch_cache.BatchCache(description, writer=writer)


def note_cache_off(record: dict, on_gpu: bool, cache) -> None:
    """A GPU search without a cache says why in its record."""
    if on_gpu and cache is None:
        record["cache"] = {"used": False, "note": f"{batch_cache.ENV}=off"}


def torch_batch_cache(trainer, ctx, fastest: bool):
    """The cache entry for this process's GPU; None on a CPU (the memory model is
    not cached) or when HPCAI_BATCH_CACHE=off."""
    if ctx.device_type != "cuda":
        return None
    import torch

    from hpcai.workloads import distributed

    memory = int(torch.cuda.get_device_properties(ctx.device).total_memory)
    return gpu_batch_cache(trainer.spec, distributed.device_name(ctx), memory, f"torch {torch.__version__}",
                           fastest, ctx.local_rank == 0, ddp=bool(ctx.distributed))


def no_sync(model):
    """DDP's no_sync (gradients stay local: a probe that runs out of memory on
    one process cannot leave the others waiting in an all-reduce)."""
    return model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()


# ---- process memory (Linux) -----------------------------------------------------


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux 4.0+)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_bytes() -> int | None:
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024


def current_rss_bytes() -> int:
    kib = _status_kib("VmRSS")
    return 0 if kib is None else kib * 1024


def available_memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
