"""Are two runs of one workload (often two centres') comparable? Each reason
is named and graded: a difference in what was measured makes the pair not
comparable; a difference in how (stack, boundary, a warning) is a caveat. Other
hardware under the same workload, settings, protocol and cap is its own verdict,
"different hardware": not the same measurement, but the comparison of two GPUs,
answered with ratios (bundles/hardware.py).

The GPU variant is the device table's (hpcai/devices/gpus.toml: memory size and
bandwidth), with the memory each board reported: "H100" alone names parts
from 64 GB to 94 GB and from 2.0 to 3.9 TB/s.
"""
from __future__ import annotations

from hpcai.launcher.run.comparability import NEUTRAL, PROTOCOL_KEYS

COMPARABLE, CAVEATS, NOT_COMPARABLE = "comparable", "comparable with caveats", "not comparable"
HARDWARE = "different hardware"  # same workload, settings, protocol and cap; other GPUs
# Board memory as reported (bytes) within this share: the same part (drivers reserve a little).
MEMORY_SAME_FRAC = 0.03


def _spec(doc: dict) -> dict:
    return doc.get("spec") or {}


def _gpus(doc: dict) -> list[dict]:
    return [g for g in doc.get("gpus") or [] if g.get("used")]


def gpu_variant(doc: dict) -> dict | None:
    """{model, memory_gb, bandwidth_tbs, count} of the run's GPUs (None: a CPU run)."""
    from hpcai import devices

    used = _gpus(doc)
    if not used:
        return None
    names = sorted({g.get("name") or "?" for g in used})
    device = devices.lookup(names[0])
    memory = [g.get("memory_total_bytes") for g in used if g.get("memory_total_bytes")]
    return {"names": names, "model": device.model if device else names[0],
            "memory_gb": round(max(memory) / 2**30, 1) if memory else (device.memory_gb if device else None),
            "bandwidth_tbs": device.bandwidth_tbs if device else None, "count": len(used)}


def _variant_reasons(a: dict, b: dict) -> list[tuple[str, str]]:
    va, vb = gpu_variant(a), gpu_variant(b)
    if (va is None) != (vb is None):
        return [(HARDWARE, "one run is on GPUs, the other on the CPU")]
    if va is None:
        return []
    out = []
    if va["model"] != vb["model"] or len(va["names"]) > 1 or len(vb["names"]) > 1:
        out.append((HARDWARE, f"GPU {va['model']} vs {vb['model']}"))
    elif va["memory_gb"] and vb["memory_gb"] and \
            abs(va["memory_gb"] - vb["memory_gb"]) > MEMORY_SAME_FRAC * max(va["memory_gb"], vb["memory_gb"]):
        out.append((HARDWARE, f"GPU variant {va['model']} {va['memory_gb']:g} GB vs "
                                    f"{vb['memory_gb']:g} GB: another memory size (and bandwidth)"))
    if va["bandwidth_tbs"] != vb["bandwidth_tbs"] and va["model"] == vb["model"]:
        out.append((HARDWARE, f"memory bandwidth {va['bandwidth_tbs']} vs {vb['bandwidth_tbs']} TB/s"))
    if va["count"] != vb["count"]:
        out.append((NOT_COMPARABLE, f"{va['count']} GPU(s) vs {vb['count']}"))
    return out


def _settings_reasons(a: dict, b: dict) -> list[tuple[str, str]]:
    sa, sb = _spec(a), _spec(b)
    out = []
    if sa.get("preset") != sb.get("preset"):
        out.append((NOT_COMPARABLE, f"preset {sa.get('preset')!r} vs {sb.get('preset')!r}"))
    if sa.get("impl") != sb.get("impl"):
        out.append((NOT_COMPARABLE, f"implementation {sa.get('impl')!r} vs {sb.get('impl')!r}"))
    pa, pb = sa.get("params") or {}, sb.get("params") or {}
    for key in sorted((set(pa) | set(pb)) - NEUTRAL):
        if pa.get(key) != pb.get(key):
            out.append((NOT_COMPARABLE, f"setting {key}: {pa.get(key)!r} vs {pb.get(key)!r}"))
    qa, qb = a.get("protocol") or {}, b.get("protocol") or {}
    for key in PROTOCOL_KEYS:
        if qa.get(key) != qb.get(key):
            out.append((CAVEATS, f"protocol {key}: {qa.get(key)} vs {qb.get(key)}"))
    return out


def _stack_reasons(a: dict, b: dict) -> list[tuple[str, str]]:
    wa, wb = a.get("software") or {}, b.get("software") or {}
    out = []
    da, db = (wa.get("gpu_library") or {}).get("driver"), (wb.get("gpu_library") or {}).get("driver")
    if da != db:
        out.append((CAVEATS, f"driver {da} vs {db}"))
    for key in ("framework_version", "hpcai"):
        if wa.get(key) != wb.get(key):
            out.append((CAVEATS, f"{key} {wa.get(key)} vs {wb.get(key)}"))
    la, lb = wa.get("libraries") or {}, wb.get("libraries") or {}
    for lib in sorted(set(la) | set(lb)):
        if la.get(lib) != lb.get(lib):
            out.append((CAVEATS, f"{lib} {la.get(lib)} vs {lb.get(lib)}"))
    return out


def _cap_reasons(a: dict, b: dict) -> list[tuple[str, str]]:
    ca, cb = (a.get("power") or {}).get("cap") or {}, (b.get("power") or {}).get("cap") or {}
    out = []
    if ca.get("requested_w") != cb.get("requested_w"):
        out.append((NOT_COMPARABLE, f"cap {ca.get('requested_w')} W vs {cb.get('requested_w')} W"))
    for who, cap in (("A", ca), ("B", cb)):
        if cap.get("requested_w") is not None and cap.get("enforced") is not True:
            out.append((NOT_COMPARABLE if cap.get("enforced") is False else CAVEATS,
                        f"run {who}'s cap was {'not enforced' if cap.get('enforced') is False else 'not checked'}"))
    return out


def _boundary_reasons(a: dict, b: dict) -> list[tuple[str, str]]:
    pa, pb = a.get("power") or {}, b.get("power") or {}
    out = []
    if pa.get("energy_scope") != pb.get("energy_scope"):
        out.append((CAVEATS, f"energy boundary {pa.get('energy_scope')} vs {pb.get('energy_scope')}: "
                             "throughput compares, energy does not"))
    if pa.get("energy_with_overhead_basis") != pb.get("energy_with_overhead_basis"):
        out.append((CAVEATS, f"node energy basis {pa.get('energy_with_overhead_basis')!r} vs "
                             f"{pb.get('energy_with_overhead_basis')!r}"))
    return out


def _validity_reasons(va: dict, vb: dict) -> list[tuple[str, str]]:
    out = []
    for who, v in (("A", va), ("B", vb)):
        if v.get("verdict") == "fail":
            out.append((NOT_COMPARABLE, f"run {who} fails validity: {', '.join(v.get('failed') or [])}"))
        elif v.get("verdict") == "warn":
            warned = sorted({c["name"] for c in v.get("checks") or [] if c.get("verdict") == "warn"})
            out.append((CAVEATS, f"run {who} has validity warnings: {', '.join(warned)}"))
    return out


def compare(a: dict, b: dict, validity_a: dict, validity_b: dict) -> dict:
    """{verdict, reasons: [{grade, reason}]} for runs a and b (result documents)
    with their recomputed validity blocks."""
    if a.get("workload") != b.get("workload"):
        reasons = [(NOT_COMPARABLE, f"workload {a.get('workload')} vs {b.get('workload')}")]
    else:
        reasons = (_settings_reasons(a, b) + _variant_reasons(a, b) + _stack_reasons(a, b)
                   + _cap_reasons(a, b) + _boundary_reasons(a, b)
                   + _validity_reasons(validity_a, validity_b))
    grades = {g for g, _ in reasons}
    verdict = next((g for g in (NOT_COMPARABLE, HARDWARE) if g in grades), CAVEATS if reasons else COMPARABLE)
    found = {"verdict": verdict, "reasons": [{"grade": g, "reason": r} for g, r in reasons]}
    if verdict == HARDWARE:
        from hpcai.launcher.bundles.hardware import ratios

        found["ratios"] = ratios(a, b)
    return found
