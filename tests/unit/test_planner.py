"""`hpcai-launch plan` (issue 42 §1): results for three GPU models built from the
seed paper's rows (two repeats per cap, power drawn at a fixed fraction of the cap),
a two-class mix, prices and a budget; every number of plan.json checked against a
computation written here, independently of launcher/planner (plain tuples, the
paper's CSV read with the csv module, the t quantile from the textbook table)."""
import csv
import json
import math
import subprocess
from pathlib import Path

import pytest
from conftest import LAUNCHER, ROOT, one_line_error
from report_docs import make_result, write_result

from hpcai.launcher.planner import PlanOptions, make_plan
from hpcai.launcher.report import ReportOptions, make_report

MODELS = {"H100": ("NVIDIA H100 80GB HBM3", "nvidia"), "H200": ("NVIDIA H200", "nvidia"),
          "MI300X": ("AMD Instinct MI300X", "amd")}
WORKLOADS = {"cv": "resnet50", "llm": "llama3-8b-pretrain"}
NOT_MEASURED = {("llm", "MI300X")}  # so that one model lacks a class
REPEATS = (0.999, 1.0012)  # each cap's two repeats: per-GPU throughput x this
DRAW = 0.93  # each GPU draws 93% of its cap
T95_1 = 12.706  # Student's t, 97.5% quantile, 1 degree of freedom
GPUS, WINDOW_S, OVERHEAD_W = 4, 10.0, 100.0
PRICES = {"energy": 0.25, "pue": 1.3, "carbon": 380.0, "years": 5.0,
          "per_gpu": {"H100": 200000.0 / 4, "H200": 260000.0 / 4, "MI300X": 30000.0},
          "per_node": {"H100": 4, "H200": 4, "MI300X": 8}}
SHARES = {"cv": 0.6, "llm": 0.4}
SLOWDOWN = {"cv": 0.10, "llm": 0.05}
TARGETS = {"cv": 20000.0, "llm": 60000.0}


def paper_rows():
    text = (ROOT / "hpcai/reference/seed-paper-throughput.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    out = {}
    for row in rows:
        cls = next((c for c, w in WORKLOADS.items() if w == row["workload"]), None)
        if cls and (cls, row["gpu"]) not in NOT_MEASURED:
            per_gpu = float(row["throughput"]) / (4 if row["basis"] == "node_4gpu" else 1)
            out.setdefault((cls, row["gpu"]), []).append((float(row["cap_w"]), per_gpu,
                                                         row["enforced"] == "true"))
    return out


def build_results(folder: Path) -> None:
    for (cls, gpu), rows in paper_rows().items():
        name, vendor = MODELS[gpu]
        for cap, per_gpu, enforced in rows:
            for repeat, factor in enumerate(REPEATS):
                write_result(folder, make_result(
                    workload=WORKLOADS[cls], gpu=name, vendor=vendor, gpus=GPUS, cap_w=cap,
                    enforced=enforced, per_gpu=per_gpu * factor, power_per_gpu_w=DRAW * cap,
                    unit="tokens" if cls == "llm" else "images", sweep_id=f"{cls}-{gpu}",
                    repeat=repeat))


# ---- the independent computation: (mean, lo, hi) tuples -------------------------------
def mean_ci(values):
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T95_1 * sd / math.sqrt(len(values))
    return (mean, mean - half, mean + half)


def measured():
    """(cls, gpu) -> {cap: (throughput, efficiency)} for the enforced caps."""
    out = {}
    for (cls, gpu), rows in paper_rows().items():
        for cap, per_gpu, enforced in rows:
            if not enforced:
                continue
            thr = [per_gpu * f for f in REPEATS]
            eff = [round(t * GPUS * WINDOW_S) / (DRAW * cap * GPUS * WINDOW_S + OVERHEAD_W * WINDOW_S)
                   for t in thr]
            out.setdefault((cls, gpu), {})[cap] = (mean_ci(thr), mean_ci(eff))
    return out


def inv(x):
    return (1 / x[0], 1 / x[2], 1 / x[1])


def scale(x, k):
    return (x[0] * k, x[1] * k, x[2] * k)


def add(*xs):
    return tuple(sum(x[i] for x in xs) for i in range(3))


def unit_figures(thr, eff, gpu, prices):
    kwh = scale(inv(eff), prices["pue"] / 3.6e6)
    capital = prices["per_gpu"][gpu] / (prices["years"] * 365.25 * 86400)
    return {"energy": kwh, "cost": add(scale(inv(thr), capital), scale(kwh, prices["energy"])),
            "co2": scale(kwh, prices["carbon"]), "gpu_h": scale(inv(thr), 1 / 3600)}


def fastest(curve):
    return max(curve, key=lambda cap: curve[cap][0][0])


def ok(curve, cap, limit):
    return curve[cap][0][0] >= (1 - limit) * curve[fastest(curve)][0][0]


def mix(data, gpu, caps_by_class, shares, prices, work=None):
    """Sum over classes of W_c x per-unit figure; W_c from the fastest cap on gpu."""
    sums = {}
    for cls, cap in caps_by_class.items():
        curve = data[(cls, gpu)]
        w = work[cls] if work else shares[cls] * 3600 * curve[fastest(curve)][0][0]
        for key, value in unit_figures(*curve[cap], gpu, prices).items():
            sums[key] = add(sums.get(key, (0, 0, 0)), scale(value, w))
    return sums


def expected_partition(data, gpu, shares, prices, objective, budget=None):
    classes = [c for c in shares if (c, gpu) in data]
    curves = {c: data[(c, gpu)] for c in classes}
    caps = sorted(cap for cap in set.intersection(*(set(curves[c]) for c in classes))
                  if all(ok(curves[c], cap, SLOWDOWN[c]) for c in classes))
    totals = {cap: mix(data, gpu, dict.fromkeys(classes, cap), shares, prices) for cap in caps}
    work = {}
    if budget:
        per_node = PRICES["per_node"][gpu]
        nodes = math.ceil(sum(TARGETS[c] / (per_node * curves[c][fastest(curves[c])][0][0]) for c in classes))
        for cap, t in totals.items():
            kw = t["energy"][0] / t["gpu_h"][0] * per_node  # facility kW per busy node
            work[cap] = min(nodes, budget / kw) * per_node / t["gpu_h"][0]
        default = max(caps, key=lambda cap: (work[cap], -cap))
    else:
        default = min(caps, key=lambda cap: (totals[cap][objective][0], cap))
    base = mix(data, gpu, {c: fastest(curves[c]) for c in classes}, shares, prices)
    overrides = {}
    for c in classes:
        score = {cap: unit_figures(*curves[c][cap], gpu, prices)[objective] for cap in curves[c]}
        best = min((cap for cap in curves[c] if ok(curves[c], cap, SLOWDOWN[c])),
                   key=lambda cap: (score[cap][0], cap))
        if best != default and score[default][1] > score[best][2]:
            overrides[c] = (best, score[best], score[default])
    return default, totals[default], base, overrides, work.get(default)


def saved(now, base):
    return (1 - now[0] / base[0], 1 - now[2] / base[1], 1 - now[1] / base[2])


def close(record, triple):
    assert record["value"] == pytest.approx(triple[0], rel=1e-9)
    assert record["ci95"] == pytest.approx([triple[1], triple[2]], rel=1e-9)


# ---- the plan ------------------------------------------------------------------------
def write_inputs(tmp_path, shares=SHARES):
    mix_file = tmp_path / "mix.toml"
    mix_file.write_text("default_partition = \"gpu\"\n" + "".join(
        f"[[class]]\nname = \"{c}\"\nworkload = \"{WORKLOADS[c]}\"\npreset = \"paper\"\n"
        f"share = {s!r}\nmax_slowdown = {SLOWDOWN[c]!r}\n" for c, s in shares.items()))
    prices = tmp_path / "prices.toml"
    prices.write_text(
        f"currency = \"EUR\"\nlifetime_years = {PRICES['years']}\n[energy]\n"
        f"price_per_kwh = {PRICES['energy']}\npue = {PRICES['pue']}\ncarbon_g_per_kwh = {PRICES['carbon']}\n"
        "[gpu.H100]\nprice_per_node = 200000.0\ngpus_per_node = 4\n"
        "[gpu.H200]\nprice_per_node = 260000.0\ngpus_per_node = 4\n"
        "[gpu.MI300X]\nprice_per_gpu = 30000.0\ngpus_per_node = 8\n")
    return mix_file, prices


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan") / "results"
    build_results(folder)
    return folder


def plan(tmp_path, results, name="out", **opts):
    mix_file, prices = write_inputs(tmp_path)
    opts = {"mix": mix_file, "prices": prices, "output": tmp_path / name, "objective": "cost",
            "targets": [f"{c}={r:g}" for c, r in TARGETS.items()], **opts}
    make_plan([results], PlanOptions(**opts))
    return json.loads((tmp_path / name / "plan.json").read_text())


@pytest.mark.parametrize("objective", ["cost", "energy", "co2"])
def test_partitions_match_an_independent_computation(tmp_path, results, objective):
    doc, data = plan(tmp_path, results, objective=objective), measured()
    assert {e["gpu"] for e in doc["partitions"]} == {"H100", "H200", "MI300X"}
    for entry in doc["partitions"]:
        gpu = entry["gpu"]
        default, totals, base, overrides, _ = expected_partition(data, gpu, SHARES, PRICES, objective)
        assert entry["default_cap_w"] == default, gpu
        assert entry["missing_classes"] == (["llm"] if gpu == "MI300X" else [])
        got = entry["predicted"]
        close(got["per_mix_gpu_hour"]["energy_kwh"], totals["energy"])
        close(got["per_mix_gpu_hour"]["cost"], totals["cost"])
        close(got["per_mix_gpu_hour"]["co2_g"], totals["co2"])
        close(got["per_mix_gpu_hour"]["gpu_hours"], totals["gpu_h"])
        for key, figure in (("energy_saved", "energy"), ("cost_saved", "cost"), ("co2_saved", "co2")):
            close(got[key], saved(totals[figure], base[figure]))
        close(got["throughput_lost"], saved(base["gpu_h"], totals["gpu_h"]))
        assert {o["class"]: o["cap_w"] for o in entry["overrides"]} == {c: o[0] for c, o in overrides.items()}
        for o in entry["overrides"]:
            _, best, at_default = overrides[o["class"]]
            close(o["per_unit"], best)
            close(o["default_per_unit"], at_default)
            close(o["gain"], saved(best, at_default))
    # Energy: the classes' own best caps differ from the mix's; cost: the purchase dominates.
    assert any(e["overrides"] for e in doc["partitions"]) == (objective != "cost")


def model_mix(data, gpu, shares, prices):
    """The policy's cap per class on gpu and the mix's figures per mix-hour (work from
    the fastest model per class, shares renormalised over the classes gpu has)."""
    default, _, _, overrides, _ = expected_partition(data, gpu, shares, prices, "cost")
    caps = {c: overrides[c][0] if c in overrides else default for c in shares if (c, gpu) in data}
    top = {c: max(data[k][fastest(data[k])][0][0] for k in data if k[0] == c) for c in caps}
    weight = sum(shares[c] for c in caps)
    work = {c: shares[c] / weight * 3600 * top[c] for c in caps}
    return caps, mix(data, gpu, caps, shares, prices, work=work)


def ranking(data, shares, prices):
    scores = {g: model_mix(data, g, shares, prices)[1]["cost"][0] for g in MODELS}
    return sorted(scores, key=scores.get)


def test_procurement_matches_an_independent_computation(tmp_path, results):
    doc, data = plan(tmp_path, results), measured()
    for model in doc["procurement"]:
        gpu = model["gpu"]
        caps, figures = model_mix(data, gpu, SHARES, PRICES)
        assert {c: f["setting"]["cap_w"] for c, f in model["classes"].items()} == caps
        per_node = PRICES["per_node"][gpu]
        for c, cap in caps.items():
            thr, eff = data[(c, gpu)][cap]
            unit = unit_figures(thr, eff, gpu, PRICES)
            got = model["classes"][c]
            close(got["throughput_per_gpu"], thr)
            close(got["throughput_per_node"], scale(thr, per_node))
            close(got["work_per_kwh"], inv(unit["energy"]))
            close(got["cost_per_unit"], unit["cost"])
            close(got["co2_g_per_unit"], unit["co2"])
            close(got["power_per_node_kw"], (thr[0] / eff[0] * per_node * 1.3 / 1000,
                                             thr[1] / eff[2] * per_node * 1.3 / 1000,
                                             thr[2] / eff[1] * per_node * 1.3 / 1000))
        for key in ("energy", "cost", "co2"):
            close(model["per_mix_hour"][key], figures[key])
        if gpu == "MI300X":  # llm never measured there: named, no nodes for both targets
            assert model["missing_classes"] == ["llm"] and model["nodes_needed"] is None
            continue
        nodes = add(*(scale(inv(data[(c, gpu)][caps[c]][0]), TARGETS[c] / per_node) for c in caps))
        assert model["nodes_needed"]["value"] == math.ceil(nodes[0])
        assert model["nodes_needed"]["ci95"] == [math.ceil(nodes[1]), math.ceil(nodes[2])]
        power = add(*(scale(unit_figures(*data[(c, gpu)][caps[c]], gpu, PRICES)["energy"], TARGETS[c] * 3600)
                      for c in caps))
        close(model["power_kw"], power)
    assert [m["gpu"] for m in doc["procurement"]] == ranking(data, SHARES, PRICES)
    assert [m["rank"] for m in doc["procurement"]] == [1, 2, 3]


def test_budget_gives_the_most_work_within_it(tmp_path, results):
    doc, data = plan(tmp_path, results, objective="energy", budget_kw=40.0), measured()
    for entry in doc["partitions"]:
        default, _, _, _, work = expected_partition(data, entry["gpu"], SHARES, PRICES, "energy", budget=40.0)
        assert entry["default_cap_w"] == default, entry["gpu"]
        assert entry["budget"]["mix_hours_per_hour"]["value"] == pytest.approx(work, rel=1e-9)


def test_sensitivity_rows_match_recomputed_answers(tmp_path, results):
    doc, data = plan(tmp_path, results), measured()
    base = {e["gpu"]: e["default_cap_w"] for e in doc["partitions"]}
    rows = {r["input"]: r for r in doc["sensitivity"]}
    assert set(rows) == {f"{what} {sign}" for what in ("energy price", "purchase prices", "share of cv")
                         for sign in ("-20%", "+20%")}
    for sign, factor in (("-20%", 0.8), ("+20%", 1.2)):
        energy = {**PRICES, "energy": PRICES["energy"] * factor}
        purchase = {**PRICES, "per_gpu": {g: p * factor for g, p in PRICES["per_gpu"].items()}}
        cv = SHARES["cv"] * factor
        share = {"cv": cv, "llm": 1 - cv}
        for name, prices, shares in ((f"energy price {sign}", energy, SHARES),
                                     (f"purchase prices {sign}", purchase, SHARES),
                                     (f"share of cv {sign}", PRICES, share)):
            caps = {g: expected_partition(data, g, shares, prices, "cost")[0] for g in MODELS}
            best = ranking(data, shares, prices)[0]
            assert rows[name]["default_caps"] == {f"gpu/{g}": c for g, c in caps.items()}, name
            assert rows[name]["best_gpu"] == best, name
            assert rows[name]["changed"] == (["best_gpu"] if best != doc["procurement"][0]["gpu"] else []) + [
                f"default cap gpu/{g}" for g in caps if caps[g] != base[g]], name


def test_policy_toml_is_the_plans_policy(tmp_path, results):
    import hashlib
    import tomllib

    doc = plan(tmp_path, results)
    policy = tomllib.loads((tmp_path / "out" / "policy.toml").read_text())["policy"]
    digest = hashlib.sha256((tmp_path / "out" / "plan.json").read_bytes()).hexdigest()
    assert policy["plan"] == f"sha256:{digest}"
    assert {(d["partition"], d["gpu"]): d["cap_w"] for d in policy["default"]} == \
        {(e["partition"], e["gpu"]): e["default_cap_w"] for e in doc["partitions"]}
    assert sorted((o["gpu"], o["class"], o["cap_w"]) for o in policy.get("override", [])) == \
        sorted((e["gpu"], o["class"], o["cap_w"]) for e in doc["partitions"] for o in e["overrides"])
    assert (tmp_path / "out" / "plan.md").read_text().startswith("# hpcai plan")
    assert "<table" in (tmp_path / "out" / "plan.html").read_text()


def test_one_class_default_cap_is_the_reports_recommended_cap(tmp_path, results):
    mix_file = tmp_path / "one.toml"
    mix_file.write_text('[[class]]\nname = "cv"\nworkload = "resnet50"\nshare = 1.0\n')
    make_plan([results], PlanOptions(mix=mix_file, output=tmp_path / "plan", max_slowdown=0.10))
    got = {e["gpu"]: e["default_cap_w"] for e in json.loads((tmp_path / "plan" / "plan.json").read_text())["partitions"]}
    make_report([results], ReportOptions(output=tmp_path / "report", max_slowdown=0.10))
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    want = {r["device"]: r["recommended_cap_w"] for r in report["best_caps"] if r["workload"] == "resnet50"}
    assert got == want and len(got) == 3


# ---- bad input: one line, exit 2, nothing written -------------------------------------
BAD_MIX = {
    "shares": ('[[class]]\nname = "a"\nworkload = "resnet50"\nshare = 0.5\n'
               '[[class]]\nname = "b"\nworkload = "sd2"\nshare = 0.4\n', "sum to 0.9"),
    "unknown workload": ('[[class]]\nname = "a"\nworkload = "nosuch"\nshare = 1.0\n', "unknown workload 'nosuch'"),
    "nan share": ('[[class]]\nname = "a"\nworkload = "resnet50"\nshare = nan\n', "share is nan"),
    "slowdown": ('[[class]]\nname = "a"\nworkload = "resnet50"\nshare = 1.0\nmax_slowdown = 1.0\n', "max_slowdown is 1.0"),
    "twice": ('[[class]]\nname = "a"\nworkload = "resnet50"\nshare = 0.5\n'
              '[[class]]\nname = "a"\nworkload = "sd2"\nshare = 0.5\n', "more than once"),
}


def test_cost_without_prices_is_one_line_and_exit_2(tmp_path, results):
    mix_file, _ = write_inputs(tmp_path)
    done = launch(tmp_path, str(results), "--mix", str(mix_file), "--objective", "cost")
    one_line_error(done, "--objective cost needs --prices")
    assert done.returncode == 2 and not (tmp_path / "out").exists()


def launch(tmp_path, *args):
    return subprocess.run([*LAUNCHER, "plan", *args, "-o", str(tmp_path / "out")], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("case", sorted(BAD_MIX))
def test_bad_mix_is_one_line_and_exit_2(tmp_path, results, case):
    text, fragment = BAD_MIX[case]
    (tmp_path / "mix.toml").write_text(text)
    done = launch(tmp_path, str(results), "--mix", str(tmp_path / "mix.toml"))
    one_line_error(done, fragment)
    assert done.returncode == 2 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("prices, args, fragment", [
    ("[energy]\nprice_per_kwh = -0.1\n", (), "price_per_kwh is -0.1"),
    ("[gpu.H100]\nprice_per_gpu = nan\n", (), "price_per_gpu is nan"),
    ("", ("--budget-kw", "nan"), "--budget-kw is nan, not a finite number"),
    ("", ("--target", "cv=-5"), "the rate is not a positive number"),
    ("", ("--target", "nosuch=5"), "names no class"),
    ("[energy]\npue = 0.9\n", (), "pue is 0.9"),
    ("[gpu.H100]\nprice_per_node = 1.0\n", (), "needs price_per_node with gpus_per_node"),
])
def test_bad_prices_and_options_are_one_line_and_exit_2(tmp_path, results, prices, args, fragment):
    mix_file, _ = write_inputs(tmp_path)
    (tmp_path / "p.toml").write_text(prices)
    done = launch(tmp_path, str(results), "--mix", str(mix_file), "--prices", str(tmp_path / "p.toml"), *args)
    one_line_error(done, fragment)
    assert done.returncode == 2 and not (tmp_path / "out").exists()


# ---- the knob, the paper's rows, what was left out -------------------------------------
def binding(doc, binds):
    doc["power"]["cap_binding"] = {"binds": binds, "limit_w": doc["spec"]["power"]["cap_w"],
                                   "power_drawn_w": {"min": 150.0, "mean": 250.0, "max": 300.0}, "per_gpu": []}
    return doc


def test_a_cap_that_does_not_bind_gets_the_measured_clock_lock(tmp_path):
    # Serving: 300 W binds (and is too slow); 500 and 700 W never bind (the GPU draws ~300 W);
    # an SM clock lock at 1410 MHz keeps 95% of the speed at 220 W.
    folder = tmp_path / "results"
    for cap, per_gpu, watts, binds in ((300.0, 800.0, 280.0, True), (500.0, 1000.0, 300.0, False),
                                       (700.0, 1000.0, 301.0, False)):
        for repeat, factor in enumerate(REPEATS):
            write_result(folder, binding(make_result(
                workload="llama3-8b-inference", unit="tokens", cap_w=cap, per_gpu=per_gpu * factor,
                power_per_gpu_w=watts, sweep_id="caps", repeat=repeat), binds))
    for repeat, factor in enumerate(REPEATS):
        doc = make_result(workload="llama3-8b-inference", unit="tokens", cap_w=None, per_gpu=950.0 * factor,
                          power_per_gpu_w=220.0, sweep_id="clocks", repeat=repeat, sm_clock=1410.0)
        doc["spec"]["power"]["clocks"] = {"sm_mhz": 1410, "mem_mhz": None}
        write_result(folder, doc)
    mix_file = tmp_path / "mix.toml"
    mix_file.write_text('[[class]]\nname = "chat"\nworkload = "llama3-8b-inference"\nshare = 1.0\n')
    make_plan([folder], PlanOptions(mix=mix_file, output=tmp_path / "plan"))
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    (entry,) = doc["partitions"]
    assert entry["default_cap_w"] == 700.0  # 500 W did not bind: left out as the report does
    (over,) = entry["overrides"]
    assert over["class"] == "chat" and over["sm_clock_mhz"] == 1410.0 and "cap_w" not in over
    eff = {w: [round(t * f * GPUS * WINDOW_S) / (w * GPUS * WINDOW_S + OVERHEAD_W * WINDOW_S) for f in REPEATS]
           for w, t in ((220.0, 950.0), (301.0, 1000.0))}
    clock, cap = (scale(inv(mean_ci(eff[w])), 1 / 3.6e6) for w in (220.0, 301.0))
    close(over["per_unit"], clock)
    close(over["default_per_unit"], cap)
    close(over["gain"], saved(clock, cap))
    assert "does not bind" in over["why"]
    policy = (tmp_path / "plan" / "policy.toml").read_text()
    assert 'class = "chat"\nsm_clock_mhz = 1410\n' in policy


def test_reference_fills_a_class_never_measured_labelled(tmp_path, results):
    doc = plan(tmp_path, results, reference=True)
    (mi300x,) = [m for m in doc["procurement"] if m["gpu"] == "MI300X"]
    assert mi300x["missing_classes"] == []
    llm = mi300x["classes"]["llm"]
    assert llm["source"] == "paper" and mi300x["classes"]["cv"]["source"] == "measured"
    rows = {float(r["cap_w"]): float(r["throughput"]) / 4 for r in csv.DictReader(
        line for line in (ROOT / "hpcai/reference/seed-paper-throughput.csv").read_text().splitlines()
        if not line.startswith("#")) if r["workload"] == "llama3-8b-pretrain" and r["gpu"] == "MI300X"}
    cap = llm["setting"]["cap_w"]
    assert llm["throughput_per_gpu"] == {"value": rows[cap], "ci95": [rows[cap], rows[cap]]}
    # The paper's rows carry no power: at the cap plus 100 W per 4-GPU node.
    assert llm["work_per_kwh"]["value"] == pytest.approx(rows[cap] / (cap + 25.0) * 3.6e6 / 1.3)


def test_another_configuration_is_left_out_and_said_why(tmp_path, results):
    import shutil

    folder = tmp_path / "results"
    shutil.copytree(results, folder)
    write_result(folder, make_result(workload="resnet50", preset="smoke", cap_w=300.0, per_gpu=5000.0,
                                     power_per_gpu_w=100.0))
    doc = plan(tmp_path, folder)
    assert any("preset 'smoke', the class asks for 'paper'" in line for line in doc["left_out"])
    (h100,) = [m for m in doc["procurement"] if m["gpu"] == "H100"]
    assert h100["classes"]["cv"]["throughput_per_gpu"]["value"] < 5000.0


def test_a_paper_preset_run_that_overrode_it_is_not_ranked_with_one_that_did_not(tmp_path):
    folder = tmp_path / "results"
    for gpu, comparable in (("H100", True), ("H200", False)):
        for cap in (400.0, 700.0):
            doc = make_result(gpu=MODELS[gpu][0], cap_w=cap, per_gpu=cap * 2, power_per_gpu_w=cap * 0.9)
            doc["comparability"] = {"preset_kind": "paper", "comparable_to_paper": comparable,
                                    "reasons": [] if comparable else ["--batch-size 64 overrides the paper's 256"]}
            write_result(folder, doc)
    mix_file = tmp_path / "mix.toml"
    mix_file.write_text('[[class]]\nname = "cv"\nworkload = "resnet50"\nshare = 1.0\n')
    make_plan([folder], PlanOptions(mix=mix_file, output=tmp_path / "plan"))
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert [m["gpu"] for m in doc["procurement"]] == ["H100"]
    (line,) = doc["left_out"]
    assert line.startswith("cv: H200 (") and "--batch-size 64 overrides the paper's 256" in line


@pytest.mark.parametrize("args, says", [
    ([], "plan needs a job mix"),
    (["--mix", "m.toml", "--mix-from-sacct", "--since", "2026-01-01", "--partition", "gpu"],
     "--mix and --mix-from-sacct both name a mix"),
    (["--mix-from-sacct", "--partition", "gpu"], "--mix-from-sacct needs --since and --partition"),
])
def test_the_mix_is_given_once_and_sacct_needs_its_window(tmp_path, args, says):
    from click.testing import CliRunner

    from hpcai.launcher.cli.hpcai_launch import main

    done = CliRunner().invoke(main, ["plan", str(tmp_path), *args, "-o", str(tmp_path / "out")])
    assert done.exit_code == 2, done.output
    assert says in done.output and len(done.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_cap_that_does_not_bind_gets_the_measured_power_profile(tmp_path):
    """The third knob (--power-profile): where the caps do not bind and a profile was
    measured that does the work for less, the plan sets the profile for the class."""
    folder = tmp_path / "results"
    for cap, per_gpu, watts, binds in ((300.0, 800.0, 280.0, True), (500.0, 1000.0, 300.0, False),
                                       (700.0, 1000.0, 301.0, False)):
        for repeat, factor in enumerate(REPEATS):
            write_result(folder, binding(make_result(
                workload="llama3-8b-inference", unit="tokens", cap_w=cap, per_gpu=per_gpu * factor,
                power_per_gpu_w=watts, sweep_id="caps", repeat=repeat), binds))
    for repeat, factor in enumerate(REPEATS):
        doc = make_result(workload="llama3-8b-inference", unit="tokens", cap_w=None, per_gpu=970.0 * factor,
                          power_per_gpu_w=240.0, sweep_id="profiles", repeat=repeat)
        doc["spec"]["power"]["profile"] = "max-q"
        write_result(folder, doc)
    mix_file = tmp_path / "mix.toml"
    mix_file.write_text('[[class]]\nname = "chat"\nworkload = "llama3-8b-inference"\nshare = 1.0\n')
    make_plan([folder], PlanOptions(mix=mix_file, output=tmp_path / "plan"))
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    (entry,) = doc["partitions"]
    assert entry["default_cap_w"] == 700.0
    (over,) = entry["overrides"]
    assert over["class"] == "chat" and over["power_profile"] == "max-q" and "cap_w" not in over
    eff = {w: [round(t * f * GPUS * WINDOW_S) / (w * GPUS * WINDOW_S + OVERHEAD_W * WINDOW_S) for f in REPEATS]
           for w, t in ((240.0, 970.0), (301.0, 1000.0))}
    profile, cap = (scale(inv(mean_ci(eff[w])), 1 / 3.6e6) for w in (240.0, 301.0))
    close(over["per_unit"], profile)
    close(over["default_per_unit"], cap)
    assert "does not bind; the power profile max-q does the same work for less" in over["why"]
    policy = (tmp_path / "plan" / "policy.toml").read_text()
    assert 'class = "chat"\npower_profile = "max-q"\n' in policy
    assert "chat: profile max-q" in (tmp_path / "plan" / "plan.md").read_text()


def _one_class_results(folder, watts: float) -> None:
    for cap in (300.0, 500.0, 700.0):
        for repeat, factor in enumerate(REPEATS):
            write_result(folder, make_result(workload="resnet50", cap_w=cap, per_gpu=cap * 2 * factor,
                                             power_per_gpu_w=watts if cap >= watts else cap,
                                             sweep_id="caps", repeat=repeat))


@pytest.mark.parametrize("production_wh, flagged", [(420.0, False), (150.0, True)])
def test_production_energy_per_gpu_hour_beside_the_benchmark_and_a_large_gap_flagged(tmp_path, production_wh,
                                                                                   flagged):
    """Receipts' figures (the mix's measured_wh_per_gpu_hour, measured_gpu) beside the
    benchmark's GPU power at the setting the policy runs the class at (W = Wh per GPU-hour)."""
    _one_class_results(tmp_path / "results", watts=400.0)
    mix = tmp_path / "mix.toml"
    mix.write_text('[[class]]\nname = "cv"\nworkload = "resnet50"\nshare = 1.0\ngpu_hours = 1200.0\n'
                   f'measured_wh_per_gpu_hour = {production_wh}\nmeasured_gpu = "H100"\n')
    make_plan([tmp_path / "results"], PlanOptions(mix=mix, output=tmp_path / "plan"))
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    (entry,) = doc["partitions"]
    (row,) = doc["production"]
    cap = entry["default_cap_w"]
    benchmark = 400.0 if cap >= 400.0 else cap  # the crafted results' GPU power at that cap
    assert row["class"] == "cv" and row["gpu"] == "H100" and row["setting"] == {"cap_w": cap}
    assert row["benchmark_wh_per_gpu_hour"] == pytest.approx(benchmark)
    assert row["ratio"] == pytest.approx(production_wh / benchmark)
    assert row["flagged"] is flagged
    text = (tmp_path / "plan" / "plan.md").read_text()
    assert ("the benchmark does not represent this class" in text) is flagged


def test_mix_from_receipts_needs_the_site(tmp_path):
    from click.testing import CliRunner

    from hpcai.launcher.cli.hpcai_launch import main

    done = CliRunner().invoke(main, ["plan", str(tmp_path), "--mix-from-receipts", "-o", str(tmp_path / "out")])
    assert done.exit_code == 2 and "--mix-from-receipts needs --site" in done.output
    both = CliRunner().invoke(main, ["plan", str(tmp_path), "--mix-from-receipts", "--mix-from-sacct",
                                     "-o", str(tmp_path / "out")])
    assert both.exit_code == 2 and "both name a mix" in both.output
    assert not (tmp_path / "out").exists()
