"""Where each run came from and whether it verified: `report` over signed bundles
(folders, .tar files, oras:// references) and loose results alike.

pull_and_verify() pulls or unpacks bundles and verifies them against the site's
trusted keys before anything is loaded; verified() checks the bundles the results
store's walk found in local folders; mark() sets each loaded run's origin (the site
that measured it: the signer's, for a bundle) and verification (verified,
unsigned, failed). A failed bundle's runs get a problem, so they are listed and
never averaged. origins_table() and sites_table() are the report's section.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hpcai.launcher.report.cell_origins import UNSIGNED
from hpcai.launcher.report.tables import Table, TCell


@dataclass
class Origin:
    site: str
    verification: str
    reason: str


def pulled(paths: list) -> bool:
    """Whether any path is a registry reference or a packed bundle (pull_and_verify's)."""
    from hpcai.launcher.bundles import registry

    return any(registry.is_reference(str(p)) or str(p).endswith(".tar") for p in paths)


def verified(envelopes: list[Path]) -> dict[Path, Origin]:
    """Each result.json's origin (by resolved path) in the bundles whose envelopes
    the store's walk found (report/store.py Found.envelopes: one walk for both)."""
    return _verified(envelopes, _trusted()[0]) if envelopes else {}


def _trusted() -> tuple:
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.bundles.trust import trusted_keys

    site = sites.load(None)  # --site is not a report option: $HPCAI_SITE or the host's
    return trusted_keys(site), bool(site["images"].get("registry_https", True))


def pull_and_verify(paths: list) -> tuple[list, dict[Path, Origin]]:
    """The paths load_results can read (bundles pulled or unpacked), and each
    bundled result.json's origin, by resolved path."""
    from hpcai.launcher.bundles import registry
    from hpcai.launcher.bundles.bundle import unpack
    from hpcai.launcher.bundles.files import read_regular
    from hpcai.launcher.bundles.temp import scratch

    trusted, https = _trusted()
    work = scratch("hpcai-report-bundles-")
    plain, origins = [], {}
    for i, given in enumerate(paths):
        text = str(given)
        if registry.is_reference(text):
            folder = registry.pull(text, work / str(i), https)
        elif text.endswith(".tar") and Path(text).is_file():
            folder = unpack(read_regular(text, "packed bundle"), work / str(i))
        else:
            folder = Path(text)
        plain.append(folder)
        origins.update(_verified(_bundles_under(folder), trusted))
    return plain, origins


def _verified(bundles: list[Path], trusted) -> dict[Path, Origin]:
    from hpcai.launcher.bundles.verify import verify_bundle

    origins = {}
    for bundle in bundles:
        verdict = verify_bundle(bundle, trusted)
        for result in bundle.rglob("result.json"):
            origins[result.resolve()] = Origin(verdict.site or "?", verdict.status, verdict.reason)
    return origins


def _bundles_under(path: Path) -> list[Path]:
    """Folders under path holding a bundle's envelope (the store's walk, which
    follows no link below the folder given)."""
    from hpcai.launcher.report.store import Found, _walk_dir

    if path.is_file() or not path.is_dir():
        return []
    found = Found([], [], [], [])
    _walk_dir(path.resolve(), found)
    return sorted(found.envelopes)


def mark(runs: list, origins: dict[Path, Origin]) -> None:
    if not origins:  # no bundle read: each run's origin is its site (no path resolved)
        for run in runs:
            run.origin, run.verification = run.site, UNSIGNED
        return
    for run in runs:
        found = origins.get(Path(run.path).resolve())
        if found is None:
            run.origin, run.verification = run.site, UNSIGNED
            continue
        run.origin, run.verification = found.site, found.verification
        if found.verification == "failed":
            run.problems.append(f"bundle verification failed: {found.reason}")


def _t(text: str) -> TCell:
    return TCell(text)


def origins_table(runs: list) -> Table | None:
    """One row per run: origin and verification. Only where a bundle was read or
    results come from more than one site."""
    if not any(r.verification not in (None, UNSIGNED) for r in runs) and \
            len({r.origin for r in runs}) < 2:
        return None
    from hpcai.launcher.report.long_tables import split_columns, text_column

    columns = [text_column([r.run_id for r in runs]), text_column([r.workload for r in runs]),
               text_column([r.origin or "?" for r in runs]),
               text_column([r.verification or UNSIGNED for r in runs]),
               text_column(["included" if r.usable else "not included" for r in runs])]
    rows, more = split_columns(columns, TCell)
    notes = ["Origin: the site that measured the run (a bundle's: the site whose trusted key "
             "signed it). Verification: verified (signature, files and recomputed figures "
             "hold), unsigned (a loose result), failed (never averaged)."]
    return Table("origins", "Origin and verification of each run",
                 ["Run", "Workload", "Origin", "Verification", "In figures"], rows, notes,
                 more=more)


def _samples(run) -> bytes | None:
    from hpcai.errors import HpcaiError
    from hpcai.launcher.bundles.files import read_regular

    try:
        return read_regular(run.samples_path, "samples") if run.samples_path else None
    except HpcaiError:
        return None


# Pairs compared in full; above it (a fleet: thousands of runs per site and cap) the
# first run of each site per workload and cap stands for its site, so the table
# stays a few rows and the report never reads every result twice (n^2 pairs).
MAX_PAIRS = 200


def sites_table(runs: list) -> Table | None:
    """Runs of one workload and cap from different sites, compared (results compare)."""
    usable = [r for r in runs if r.usable]
    if len({r.origin for r in usable}) < 2:
        return None
    groups: dict = {}  # (workload, cap) -> origin -> positions in usable, in order
    for i, r in enumerate(usable):
        groups.setdefault((r.workload, r.cap_w), {}).setdefault(r.origin, []).append(i)
    notes = []
    if _pair_count(groups) > MAX_PAIRS:
        notes.append(f"{_pair_count(groups)} pairs of runs from different sites: the first run "
                     "of each site per workload and cap is compared; `hpcai-launch results "
                     "compare A B` compares any other two.")
        groups = {key: {o: members[:1] for o, members in by_origin.items()}
                  for key, by_origin in groups.items()}
    pairs = sorted((min(i, j), max(i, j)) for by_origin in groups.values()
                   for k, a in enumerate(by_origin.values())
                   for b in list(by_origin.values())[k + 1:] for i in a for j in b)
    rows = _compared([(usable[i], usable[j]) for i, j in pairs])
    if not rows:
        return None
    return Table("sites", "Comparability across sites",
                 ["Run A", "Site A", "Run B", "Site B", "Verdict", "Reasons"], rows,
                 ["As `hpcai-launch results compare A B`: settings, GPU variant, stack, cap, "
                  "measurement boundary and validity.", *notes])


def _pair_count(groups: dict) -> int:
    sizes = [[len(m) for m in by_origin.values()] for by_origin in groups.values()]
    return sum(a * b for group in sizes for k, a in enumerate(group) for b in group[k + 1:])


def _compared(pairs: list) -> list:
    """One row per pair; each result read once, only when it is compared."""
    from hpcai.launcher.bundles.compare import compare
    from hpcai.launcher.bundles.recompute import recompute

    docs: dict = {}

    def doc(run):
        if run.path not in docs:
            try:
                docs[run.path] = json.loads(Path(run.path).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                docs[run.path] = None
        return docs[run.path]

    rows = []
    for a, b in pairs:
        da, db = doc(a), doc(b)
        if da is None or db is None:
            continue
        verdict = compare(da, db, recompute(da, _samples(a)), recompute(db, _samples(b)))
        reasons = "; ".join(x["reason"] for x in verdict["reasons"]) or "–"
        rows.append([_t(a.run_id), _t(a.origin), _t(b.run_id), _t(b.origin),
                     _t(verdict["verdict"]), _t(reasons)])
    return rows
