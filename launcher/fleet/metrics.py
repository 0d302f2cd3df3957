"""What one GPU's result says, per cap: the figures the fleet is compared on,
and the flags that need no fleet to judge (cap held, throttling, counters)."""
from __future__ import annotations

from dataclasses import dataclass

# name -> (label, unit, which side is bad: "low" | "high" | "both", verdict beyond it)
METRICS = {
    "throughput": ("throughput", "units/s", "low", "fail"),
    "energy_per_unit_j": ("energy per unit", "J", "high", "fail"),
    "sm_clock_mhz": ("SM clock", "MHz", "low", "fail"),
    "power_w": ("power", "W", "both", "warn"),
    "temperature_c": ("temperature", "°C", "high", "warn"),
}
# Throttle reasons that mean heat (NVML clocks-event names; amdsmi's violations
# decode to the same names in hpcai.gpu.amd, plus their own thermal ones).
THERMAL = ("sw_thermal", "hw_thermal", "hw_slowdown", "vr_thermal", "hbm_thermal")
POWER_BRAKE = ("hw_power_brake",)


@dataclass
class CapFigures:
    cap_w: float
    values: dict  # metric -> float | None
    cap_enforced: bool | None
    throttle: dict  # reason -> share of readings
    energy_disagreement: float | None  # |counter - integrated| / counter
    run_id: str
    result: str  # path of the result.json

    def thermal_share(self) -> float:
        return max([self.throttle.get(r, 0.0) for r in THERMAL] + [0.0])

    def brake_share(self) -> float:
        return max([self.throttle.get(r, 0.0) for r in POWER_BRAKE] + [0.0])

    def to_dict(self) -> dict:
        return {"cap_w": self.cap_w, **self.values, "cap_enforced": self.cap_enforced,
                "throttle_reasons": self.throttle, "thermal_throttle_share": self.thermal_share(),
                "energy_counter_disagreement": self.energy_disagreement,
                "run_id": self.run_id, "result": self.result}


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def used_gpu(doc: dict) -> dict | None:
    """The one GPU a fleet unit's run measured; None if it measured other than one."""
    gpus = [g for g in doc.get("gpus") or [] if isinstance(g, dict) and g.get("used", True)]
    return gpus[0] if len(gpus) == 1 else None


def cap_of(doc: dict) -> float | None:
    cap = ((doc.get("power") or {}).get("cap") or {}).get("requested_w")
    if cap is None:
        cap = ((doc.get("spec") or {}).get("power") or {}).get("cap_w")
    return _number(cap)


def figures(doc: dict, path: str) -> CapFigures | None:
    """The figures of one complete single-GPU result; None for anything else."""
    gpu = used_gpu(doc)
    cap = cap_of(doc)
    if gpu is None or cap is None:
        return None
    power = doc.get("power") or {}
    energy = gpu.get("energy_j") or {}
    counter, integrated = _number(energy.get("counter")), _number(energy.get("integrated"))
    disagreement = (abs(counter - integrated) / abs(counter)
                    if counter and integrated is not None else None)
    values = {
        "throughput": _number((doc.get("throughput") or {}).get("per_gpu")),
        "energy_per_unit_j": _number(power.get("energy_per_unit_j")),
        "sm_clock_mhz": _number(gpu.get("sm_clock_mhz_mean")),
        "power_w": _number((gpu.get("power_w") or {}).get("mean")),
        "temperature_c": _number((gpu.get("temperature_c") or {}).get("mean")),
    }
    throttle = {str(k): float(v) for k, v in (gpu.get("throttle_reasons") or {}).items()
                if _number(v) is not None}
    enforced = (power.get("cap") or {}).get("enforced")
    return CapFigures(cap_w=cap, values=values,
                      cap_enforced=enforced if isinstance(enforced, bool) else None,
                      throttle=throttle, energy_disagreement=disagreement,
                      run_id=str(doc.get("run_id")), result=path)
