"""`results bundle RUN_OR_SWEEP... -o DIR`: the run files copied under
DIR/runs/, the signed statement beside them, DIR.tar too with --tar."""
from __future__ import annotations

import io
import json
import os
import re
import tarfile
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.launcher.bundles import dsse, keys
from hpcai.launcher.bundles.files import (ENVELOPE_FILE, MAX_FILE_BYTES, list_tree, new_folder,
                                          read_regular, write_new)
from hpcai.launcher.bundles.image_status import signature_status
from hpcai.launcher.bundles.recompute import recompute
from hpcai.launcher.bundles.statement import run_predicate, serialise, statement

RUNS_DIR = "runs"
# What a run folder contributes; result.json is required, the rest when the run wrote it.
RUN_FILES = ("result.json", "spec.json", "samples.csv", "mllog.txt")
SWEEP_FILE = "sweep.json"


def run_folders(given: list[str]) -> list[tuple[Path, Path | None]]:
    """(run folder, its sweep folder or None) for each RUN or SWEEP folder given."""
    found: list[tuple[Path, Path | None]] = []
    for item in given:
        path = Path(item)
        if path.is_symlink() or not path.is_dir():
            raise UsageError(f"{item} is not a run or sweep folder",
                             "give folders written by hpcai-launch (holding result.json or sweep.json)")
        if (path / "result.json").is_file():
            found.append((path, None))
        elif (path / SWEEP_FILE).is_file():
            runs = sorted(p.parent for p in path.glob("*/result.json"))
            if not runs:
                raise UsageError(f"sweep {item} holds no run folder with a result.json",
                                 "bundle a sweep once its runs have finished")
            found += [(run, path) for run in runs]
        else:
            raise UsageError(f"{item} holds neither result.json nor sweep.json",
                             "give run folders or sweep folders written by hpcai-launch")
    if len({run.resolve() for run, _ in found}) != len(found):
        raise UsageError("a run is given twice", "name each run or sweep once")
    return found


# Files beside a run's own that another site's tools read: MLPerf Power's power/<log>/
# node_<k>.txt beside mllog.txt (MLCommons' result_summarizer takes the energy from
# them: workloads/mlperf_log.py) and hpcc's own output (workloads/hpcc_app.py).
SIDE_FILES = (("power/mllog", re.compile(r"node_[0-9]+\.txt")), ("hpcc-*", re.compile(r"hpccoutf\.txt")))


def side_files(run: Path) -> list[str]:
    """The side files of a run folder, relative and sorted; no link is followed (a link
    is left out here, and list_tree refuses one in the bundle)."""
    found = []
    for pattern, names in SIDE_FILES:
        for folder in sorted(run.glob(pattern)):
            below = folder.relative_to(run)
            if any((run / p).is_symlink() for p in (below, *below.parents[:-1])) or not folder.is_dir():
                continue
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                if names.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    found.append(f"{folder.relative_to(run).as_posix()}/{entry.name}")
    return found


def _result(folder: Path, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("kind") != "hpcai.result":
        raise UsageError(f"{folder}/result.json is not an hpcai result",
                         "give folders written by hpcai-launch")
    if doc.get("status") == "running":
        raise UsageError(f"{folder} is still running", "bundle it once it has finished")
    return doc


def collect(given: list[str], site: dict) -> tuple[dict[str, bytes], list[dict]]:
    """Bundle path -> bytes for every file, and each run's predicate. Every input is
    read and checked before anything is written."""
    files: dict[str, bytes] = {}
    runs = []
    for run, sweep in run_folders(given):
        prefix = f"{RUNS_DIR}/{sweep.name}/{run.name}" if sweep else f"{RUNS_DIR}/{run.name}"
        if sweep and f"{RUNS_DIR}/{sweep.name}/{SWEEP_FILE}" not in files:
            files[f"{RUNS_DIR}/{sweep.name}/{SWEEP_FILE}"] = read_regular(sweep / SWEEP_FILE, "sweep file")
        data = read_regular(run / "result.json", "result")
        doc = _result(run, data)
        measured_at = ((doc.get("spec") or {}).get("site") or {}).get("name")
        if measured_at and measured_at != site["name"]:
            raise UsageError(f"{run} was measured under site {measured_at!r}, not {site['name']!r}",
                             "a site signs only its own results: bundle with --site "
                             f"{measured_at} and that site's key")
        for name in RUN_FILES:
            if (run / name).exists() or (run / name).is_symlink():
                files[f"{prefix}/{name}"] = read_regular(run / name, name)
        for name in side_files(run):
            files[f"{prefix}/{name}"] = read_regular(run / name, name)
        samples = files.get(f"{prefix}/samples.csv")
        image = (doc.get("runtime") or {}).get("image")
        runs.append(run_predicate(prefix, doc, recompute(doc, samples), signature_status(site, image)))
    if len(files) != len(set(files)):
        raise UsageError("two runs share a folder name", "bundle them separately")
    return files, runs


def make(given: list[str], out: str, site: dict, key_path: str | None, tar: bool) -> dict:
    """Write the bundle; returns what the CLI reports."""
    from hpcai import provenance

    key_file = key_path or (site.get("results") or {}).get("sign_key")
    if not key_file:
        raise UsageError(f"site {site['name']!r} names no signing key",
                         "set [results] sign_key in the site file or give --key PATH "
                         "(make one with `hpcai-launch results keygen PATH`)")
    private = keys.load_private(key_file)
    out_dir = Path(out)
    tar_path = Path(f"{out_dir}.tar") if tar else None
    if tar_path and (tar_path.exists() or tar_path.is_symlink()):
        raise UsageError(f"{tar_path} already exists: not overwritten", "choose another -o")
    files, runs = collect(given, site)
    predicate = {"site": site["name"], "producer": provenance.hpcai_versions(),
                 "bundled_by": provenance.host_info()["hostname"], "runs": runs}
    payload = serialise(statement(files, predicate))
    keyid = keys.key_id(private.public_key())
    envelope = dsse.sign(payload, private, keyid)
    new_folder(out_dir)
    for name, data in files.items():
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        write_new(out_dir / name, data)
    write_new(out_dir / ENVELOPE_FILE, json.dumps(envelope, indent=1).encode("utf-8"))
    if tar_path:
        write_new(tar_path, pack(out_dir))
    return {"folder": out_dir, "tar": tar_path, "runs": len(runs), "files": len(files),
            "keyid": keyid, "site": site["name"]}


def pack(folder: Path) -> bytes:
    """The bundle folder as an uncompressed tar (sorted, fixed owner and times: the
    same bundle packs to the same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in list_tree(folder):
            data = read_regular(folder / name)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack(data: bytes, out: Path) -> Path:
    """A packed bundle into a new folder; only plain files with relative names, each
    checked before anything is written."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
            _check_members(members)
            folder = new_folder(out)
            for member in members:
                target = folder / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                write_new(target, tar.extractfile(member).read())
    except tarfile.TarError as exc:
        raise UsageError(f"the packed bundle is not a tar file ({exc})", "the bundle was altered; do not use it") from None
    return folder


def _check_members(members: list) -> None:
    """Plain files with relative names, none too large, no name given twice, none both
    a file and a folder (runs/a and runs/a/result.json)."""
    altered = "the bundle was altered; do not use it"
    names = set()
    for member in members:
        name = Path(member.name)
        if not member.isfile() or name.is_absolute() or ".." in name.parts:
            raise UsageError(f"the packed bundle holds {member.name!r}, which is not a plain "
                             "file inside it", altered)
        if member.size > MAX_FILE_BYTES:
            raise UsageError(f"the packed bundle's {member.name} is larger than "
                             f"{MAX_FILE_BYTES >> 20} MB", "a bundle holds result files, not data sets")
        if name.as_posix() in names:
            raise UsageError(f"the packed bundle holds {member.name!r} twice", altered)
        names.add(name.as_posix())
    folders = {parent.as_posix() for n in names for parent in Path(n).parents}
    both = sorted(names & folders)
    if both:
        raise UsageError(f"the packed bundle holds {both[0]!r} both as a file and as a folder", altered)
