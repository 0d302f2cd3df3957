"""What `results compare` and `report` read: a run folder or result.json
(unsigned: its origin is the site it names), a bundle folder, a packed bundle
(.tar) or an oras:// reference (pulled, then verified against the site's
trusted keys). Each run comes with its origin and verification."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.launcher.bundles.bundle import ENVELOPE_FILE, RUN_FILES, unpack
from hpcai.launcher.bundles.files import read_regular
from hpcai.launcher.bundles.recompute import recompute
from hpcai.launcher.bundles.temp import scratch
from hpcai.launcher.bundles.verify import FAILED, UNSIGNED, Verdict, verify_bundle


@dataclass
class SourcedRun:
    label: str
    doc: dict | None
    validity: dict | None
    origin: str  # the site that measured (the signer's, for a bundle)
    verification: str  # verified | unsigned | failed
    reason: str
    result_path: Path | None = None


def is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / ENVELOPE_FILE).is_file()


def bundle_runs(folder: Path, verdict: Verdict) -> list[SourcedRun]:
    if verdict.status == FAILED:
        return [SourcedRun(str(p.parent), None, None, verdict.site or "?", FAILED, verdict.reason, p)
                for p in sorted(folder.rglob("result.json"))] or \
            [SourcedRun(str(folder), None, None, verdict.site or "?", FAILED, verdict.reason)]
    return [SourcedRun(str(r["folder"]), r["doc"], r["validity"], verdict.site, verdict.status,
                       verdict.reason, Path(r["folder"]) / "result.json") for r in verdict.runs]


def loose_run(path: Path) -> SourcedRun:
    from hpcai.launcher.cli.check import load_result

    result, doc = load_result(str(path))
    samples = result.parent / RUN_FILES[2]
    data = read_regular(samples) if samples.is_file() and not samples.is_symlink() else None
    origin = ((doc.get("spec") or {}).get("site") or {}).get("name") or "?"
    return SourcedRun(str(result.parent), doc, recompute(doc, data), origin, UNSIGNED,
                      "a loose result: nothing vouches for it", result)


def load(items: list[str], trusted: list, https: bool, workdir: Path | None = None) -> list[SourcedRun]:
    """Every run of every item; bundles pulled or unpacked under workdir (a temporary
    folder by default, kept as long as the process runs)."""
    from hpcai.launcher.bundles import registry

    workdir = workdir or scratch("hpcai-bundles-")
    out = []
    for i, item in enumerate(items):
        path = Path(item)
        if registry.is_reference(item):
            folder = registry.pull(item, workdir / f"{i}", https)
        elif path.is_file() and path.suffix == ".tar":
            folder = unpack(read_regular(path, "packed bundle"), workdir / f"{i}")
        elif is_bundle(path):
            folder = path
        elif path.exists():
            out.append(loose_run(path))
            continue
        else:
            raise UsageError(f"{item} does not exist", "give run folders, bundles or oras:// references")
        out += bundle_runs(folder, verify_bundle(folder, trusted))
    return out
