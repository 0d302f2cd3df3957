"""The fleet analysis: robust statistics per metric and cap, a verdict per
GPU with its reasons, the spread per cap, and drift against an earlier
campaign of the same GPUs (matched by UUID)."""
from __future__ import annotations

from dataclasses import dataclass, field

from hpcai.launcher.fleet.metrics import METRICS
from hpcai.launcher.fleet.records import GpuRecord
from hpcai.launcher.fleet.stats import DEFAULT_MIN_SPREAD, DEFAULT_THRESHOLD, MIN_GPUS_TO_FLAG, Spread, spread

VERDICTS = ("pass", "warn", "fail")
DRIFT_METRICS = ("throughput", "energy_per_unit_j", "power_w", "sm_clock_mhz")


@dataclass(frozen=True)
class Settings:
    threshold: float = DEFAULT_THRESHOLD  # |robust z| beyond this: an outlier
    min_spread: float = DEFAULT_MIN_SPREAD  # smallest scale, as a share of the median
    throttle_fail: float = 0.10  # thermal throttling in at least this share of readings: fail
    energy_disagreement: float = 0.25  # counter vs integrated energy further apart: warn
    drift_warn: float = 0.05  # throughput down / energy per unit up by more: warn
    moved_most: int = 10  # how many GPUs the drift section lists
    # The site's expected throughput per GPU, ((cap_w, floor), ...): a GPU below it fails,
    # however few GPUs there are to compare (the robust z needs MIN_GPUS_TO_FLAG).
    expected_throughput: tuple = ()

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Verdict:
    verdict: str = "pass"
    reasons: list = field(default_factory=list)  # [{"verdict", "cap_w", "metric", "text"}]

    def add(self, verdict: str, text: str, cap_w: float | None = None,
            metric: str | None = None) -> None:
        self.reasons.append({"verdict": verdict, "cap_w": cap_w, "metric": metric, "text": text})
        if VERDICTS.index(verdict) > VERDICTS.index(self.verdict):
            self.verdict = verdict


def cap_text(cap_w: float) -> str:
    return f"{cap_w:g} W"


def fleet_spread(records: list[GpuRecord], settings: Settings) -> dict:
    """{cap: {metric: Spread}} over the GPUs that have the figure."""
    caps = sorted({c for r in records for c in r.caps})
    out: dict = {}
    for cap in caps:
        out[cap] = {}
        for metric in METRICS:
            values = [r.caps[cap].values[metric] for r in records
                      if cap in r.caps and r.caps[cap].values.get(metric) is not None]
            if values:
                out[cap][metric] = spread(values, settings.min_spread)
    return out


def judge(record: GpuRecord, caps: list[float], spreads: dict, settings: Settings) -> Verdict:
    v = Verdict()
    selftest = record.selftest or {}
    if record.state == "selftest_failed":
        v.add("fail", f"selftest failed: {selftest.get('reason') or 'see selftest.json'} "
                      "(not measured)")
        return v
    if record.state != "done":
        v.add("fail", f"not measured: the unit is {record.state}")
    for cap in caps:
        fig = record.caps.get(cap)
        if fig is None:
            v.add("fail", f"no complete result at {cap_text(cap)}", cap)
            continue
        if fig.cap_enforced is False:
            drew = fig.values.get("power_w")
            v.add("fail", f"cap not enforced at {cap_text(cap)}"
                          + (f" (drew {drew:.0f} W)" if drew is not None else ""), cap, "cap")
        share = fig.thermal_share()
        if share >= settings.throttle_fail:
            v.add("fail", f"thermal throttling in {share:.0%} of readings at {cap_text(cap)}",
                  cap, "throttle")
        elif share > 0:
            v.add("warn", f"thermal throttling in {share:.0%} of readings at {cap_text(cap)}",
                  cap, "throttle")
        if fig.brake_share() > 0:
            v.add("fail", f"hardware power brake in {fig.brake_share():.0%} of readings at "
                          f"{cap_text(cap)}", cap, "throttle")
        if fig.energy_disagreement is not None and \
                fig.energy_disagreement > settings.energy_disagreement:
            v.add("warn", f"energy counter and integrated power disagree by "
                          f"{fig.energy_disagreement:.0%} at {cap_text(cap)}", cap, "energy")
        for metric, (label, _unit, bad, severity) in METRICS.items():
            value, s = fig.values.get(metric), spreads.get(cap, {}).get(metric)
            if value is None or s is None or s.n < MIN_GPUS_TO_FLAG:
                continue
            z = s.z(value)
            if abs(z) <= settings.threshold:
                continue
            side = "below" if z < 0 else "above"
            on_bad_side = bad == "both" or (bad == "low") == (z < 0)
            v.add(severity if on_bad_side else "warn",
                  f"{label} at {cap_text(cap)} {side} the fleet: robust z {z:+.1f} "
                  f"({value:.4g} vs median {s.median:.4g})", cap, metric)
        _below_expected(v, fig.values.get("throughput"), cap, settings)
    return v


def _below_expected(v: Verdict, throughput: float | None, cap: float, settings: Settings) -> None:
    floor = dict(settings.expected_throughput).get(cap)
    if floor is not None and throughput is not None and throughput < floor:
        v.add("fail", f"throughput at {cap_text(cap)} {1 - throughput / floor:.1%} below the "
                      f"site's expected {floor:.4g} ({throughput:.4g})", cap, "throughput")


def small_sets(spreads: dict, settings: Settings) -> list[str]:
    """A line per cap whose throughput the robust z cannot judge (too few GPUs): says so,
    and what judged it instead (the site's expected figure) or that nothing did."""
    expected = dict(settings.expected_throughput)
    lines = []
    for cap, per in sorted(spreads.items()):
        s = per.get("throughput")
        if s is None or s.n >= MIN_GPUS_TO_FLAG:
            continue
        instead = (f"judged against the site's expected {expected[cap]:.4g} instead" if cap in expected
                   else "nothing judged it: give the expected figure (--expect-throughput CAP=VALUE)")
        lines.append(f"{s.n} GPU(s) at {cap_text(cap)}: too few for the robust z to flag anything "
                     f"(it needs {MIN_GPUS_TO_FLAG}; spread {s.minimum:.4g}-{s.maximum:.4g}); {instead}")
    return lines


def drift(records: list[GpuRecord], baseline: list[GpuRecord], settings: Settings) -> dict:
    """Each GPU's relative change per cap and metric against its earlier figures."""
    earlier = {r.uuid: r for r in baseline if r.uuid}
    rows = []
    for record in records:
        before = earlier.get(record.uuid)
        if before is None:
            continue
        changes = {}
        for cap, fig in record.caps.items():
            old = before.caps.get(cap)
            if old is None:
                continue
            changes[cap] = {m: (fig.values[m] / old.values[m] - 1.0)
                            for m in DRIFT_METRICS
                            if fig.values.get(m) is not None and old.values.get(m)}
        if changes:
            worst = max((abs(c.get("throughput", 0.0)) for c in changes.values()), default=0.0)
            rows.append({"node": record.node, "index": record.index, "uuid": record.uuid,
                         "changes": changes, "largest_throughput_change": worst})
    rows.sort(key=lambda r: -r["largest_throughput_change"])
    matched = {r["uuid"] for r in rows}
    return {"matched": len(rows), "new": sum(1 for r in records if r.uuid not in earlier),
            "gone": sum(1 for u in earlier if u not in {r.uuid for r in records}),
            "gpus": rows, "moved_most": [r["uuid"] for r in rows[:settings.moved_most]],
            "unmatched_uuids": sorted(u for u in earlier if u not in matched)[:50]}


def drift_reasons(row: dict, settings: Settings) -> list[tuple[str, str, float, str]]:
    out = []
    for cap, change in row["changes"].items():
        tp, epu = change.get("throughput"), change.get("energy_per_unit_j")
        if tp is not None and tp < -settings.drift_warn:
            out.append(("warn", f"throughput at {cap_text(cap)} {-tp:.1%} below its earlier "
                                "campaign", cap, "throughput"))
        if epu is not None and epu > settings.drift_warn:
            out.append(("warn", f"energy per unit at {cap_text(cap)} {epu:.1%} above its earlier "
                                "campaign", cap, "energy_per_unit_j"))
    return out


def analyse(records: list[GpuRecord], caps: list[float], settings: Settings = Settings(),
            baseline: list[GpuRecord] | None = None,
            caps_by_campaign: dict[str, list[float]] | None = None) -> dict:
    """The whole analysis as a JSON-ready document (the report's fleet.json). A GPU is
    held to its own campaign's caps (caps_by_campaign), else to `caps`."""
    measured = [r for r in records if r.state != "selftest_failed"]
    spreads = fleet_spread(measured, settings)
    drifted = drift(records, baseline, settings) if baseline is not None else None
    by_uuid = {row["uuid"]: row for row in (drifted or {}).get("gpus", [])}
    gpus = []
    for record in sorted(records, key=lambda r: (r.node, r.index)):
        v = judge(record, (caps_by_campaign or {}).get(record.campaign, caps), spreads, settings)
        if record.uuid in by_uuid:
            for verdict, text, cap, metric in drift_reasons(by_uuid[record.uuid], settings):
                v.add(verdict, text, cap, metric)
        z = {cap: {m: round(spreads[cap][m].z(fig.values[m]), 3)
                   for m in METRICS if fig.values.get(m) is not None and m in spreads.get(cap, {})}
             for cap, fig in record.caps.items()}
        gpus.append({**record.identity(), "selftest": record.selftest, "verdict": v.verdict,
                     "reasons": v.reasons,
                     "caps": {_key(c): f.to_dict() for c, f in record.caps.items()},
                     "z": {_key(c): zs for c, zs in z.items()}})
    summary = {k: sum(1 for g in gpus if g["verdict"] == k) for k in VERDICTS}
    return {"kind": "hpcai.fleet.report", "format": 1, "caps_w": caps,
            "settings": settings.to_dict(), "summary": {"gpus": len(gpus), **summary},
            "spread": {_key(c): {m: s.to_dict() for m, s in per.items()}
                       for c, per in spreads.items()},
            "gpus": gpus, "drift": drifted, "small_sets": small_sets(spreads, settings)}


def _key(cap: float) -> str:
    return f"{cap:g}"


def outliers(doc: dict) -> list[dict]:
    """One row per reason of every GPU that did not pass: the ticketing table."""
    rows = []
    for g in doc["gpus"]:
        for r in g["reasons"]:
            rows.append({"node": g["node"], "index": g["index"], "uuid": g["uuid"],
                         "serial": g["serial"], "gpu_verdict": g["verdict"],
                         "verdict": r["verdict"], "cap_w": r["cap_w"], "metric": r["metric"],
                         "reason": r["text"]})
    return rows


def spread_by_cap(spreads: dict[float, dict[str, Spread]], metric: str) -> list[tuple]:
    """(cap, robust CV) as the cap falls: how variability grows (SC22)."""
    return [(cap, per[metric].robust_cv) for cap, per in sorted(spreads.items()) if metric in per]
