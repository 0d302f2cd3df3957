"""The job mix (docs: /work/tasks/formats.md, `plan --mix`) from measured
production GPU-hours: each receipt's job goes to the first of the site's
`[[classes]]` rules that matches it (fnmatch globs on job_name, account, qos;
all given keys must match), and each class's share is its GPU-hours over its
partition's classified GPU-hours. Beside each share: the class's measured GPU
energy per GPU-hour in production (measured_wh_per_gpu_hour), for the planner
to set beside the benchmark's figure.

The rules become one SQL CASE over the store (GLOB is fnmatch's *, ?, [...]),
so a million receipts are classified by DuckDB, not a Python loop.
"""
from __future__ import annotations

import re
from pathlib import Path

from hpcai.errors import ConfigError, UsageError

MATCH_KEYS = ("job_name", "account", "qos")
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def read_class_rules(site_path: str | Path) -> list[dict]:
    """The site file's [[classes]] rules (formats.md), as the site loader checks them
    (launcher/site/policy.py: one reading of the rules for sacct, the prolog and receipts)."""
    from hpcai.launcher.site import config as sites

    rules = sites.load(str(site_path)).get("classes") or []
    if not rules:
        raise ConfigError(f"{site_path} has no [[classes]] rules",
                          "add [[classes]] with name, workload and match keys (docs/how-to/job-receipts.md)")
    return rules


def class_case(rules: list[dict]) -> tuple[str, list]:
    """(SQL expression naming each receipt's class, its parameters): the first rule
    whose given keys all match; NULL where none does."""
    whens, params = [], []
    for rule in rules:
        tests = []
        for key in MATCH_KEYS:
            if key in rule:
                tests.append(f"coalesce(r.{key}, '') GLOB ?")
                params.append(rule[key])
        whens.append(f"WHEN {' AND '.join(tests) or 'true'} THEN ?")
        params.append(rule["name"])
    return f"CASE {' '.join(whens)} END", params


def measured_mix(con, rules: list[dict], where: str = "true", params: tuple = ()) -> tuple[list[dict], float]:
    """([{name, workload, partition, share, gpu_hours, measured_wh_per_gpu_hour}], the
    GPU-hours no rule matched) over the receipts that pass `where` (on alias r)."""
    case, case_params = class_case(rules)
    rows = con.execute(f"""
        WITH classed AS (SELECT r.file, {case} AS class, r.partition, r.gpu_hours, r.gpu_energy_j
                         FROM receipts r WHERE r.state <> 'open' AND {where}),
             per AS (SELECT class, partition, sum(gpu_hours) AS gh, sum(gpu_energy_j) AS j
                     FROM classed WHERE class IS NOT NULL GROUP BY ALL),
             models AS (SELECT c.class, c.partition, g.model, count(*) AS n
                        FROM classed c JOIN receipt_gpus g ON g.file = c.file
                        WHERE c.class IS NOT NULL AND g.model IS NOT NULL GROUP BY ALL),
             top AS (SELECT class, partition, arg_max(model, n) AS model FROM models GROUP BY ALL)
        SELECT p.class, p.partition, gh, gh / sum(gh) OVER (PARTITION BY p.partition),
               j / 3600.0 / nullif(gh, 0), t.model
        FROM per p LEFT JOIN top t ON t.class = p.class AND t.partition IS NOT DISTINCT FROM p.partition
        ORDER BY p.partition, p.class""", [*case_params, *params]).fetchall()
    unmatched = con.execute(f"SELECT coalesce(sum(r.gpu_hours), 0) FROM receipts r WHERE r.state <> 'open' "
                            f"AND {where} AND ({case}) IS NULL", [*params, *case_params]).fetchone()[0]
    workload = {r["name"]: r for r in rules}
    partitions_of: dict[str, int] = {}
    for c, *_ in rows:
        partitions_of[c] = partitions_of.get(c, 0) + 1
    # A mix names each class once (formats.md): one found in several partitions is named per partition.
    # Each class's GPU model: the one that held most of its GPUs (the plan compares its
    # production energy with the benchmark on that model only).
    return [{"name": c if partitions_of[c] == 1 else f"{c}.{re.sub(r'[^A-Za-z0-9._-]', '_', p or '')}",
             "workload": workload[c]["workload"], "partition": p, "share": share,
             "gpu_hours": gh, "measured_wh_per_gpu_hour": wh, "measured_gpu": model}
            for c, p, gh, share, wh, model in rows], unmatched


def mix_toml(classes: list[dict], source: str) -> str:
    """The mix file (formats.md); the measured figures as extra keys of each class."""
    if not classes:
        raise UsageError("no receipt matches a class rule, so there is no mix to write",
                         "check the site's [[classes]] rules against `results jobs --summary partition`")
    lines = [f"# written by hpcai-launch results jobs --as-mix, from {_toml_text(source)}"]
    for c in classes:
        lines += ["", "[[class]]", f'name = "{c["name"]}"', f'workload = "{_toml_text(c["workload"])}"',
                  f'share = {c["share"]:.12g}', f'partition = "{_toml_text(c["partition"] or "")}"',
                  f'gpu_hours = {c["gpu_hours"]:.3f}']
        if c["measured_wh_per_gpu_hour"] is not None:
            lines.append(f'measured_wh_per_gpu_hour = {c["measured_wh_per_gpu_hour"]:.3f}')
        if c.get("measured_gpu"):
            lines.append(f'measured_gpu = "{_toml_text(c["measured_gpu"])}"')
    return "\n".join(lines) + "\n"


def _toml_text(value: str) -> str:
    import json

    return json.dumps(str(value))[1:-1]  # a TOML basic string's escapes are JSON's
