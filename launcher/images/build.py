"""`hpcai-launch images build`: one image per family of a flavour.

Each build gets a clean copy of the repository (what git tracks, plus new
files it does not ignore), so neither .venv nor results end up in an image,
and the commit it came from (with "-dirty" for uncommitted changes) becomes a
label. Builds are unprivileged (--fakeroot) unless told otherwise.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hpcai
from hpcai.errors import ImageError, UsageError
from hpcai.launcher.images import store
from hpcai.launcher.images.apptainer import Apptainer
from hpcai.provenance import hpcai_commit
from hpcai.workloads.catalog import IMAGE_FAMILIES, family_workloads


def repository_root() -> Path:
    """The checkout the definitions come from: this package's, else the working folder."""
    for candidate in (Path(hpcai.__file__).resolve().parent.parent, Path.cwd()):
        if (candidate / "definitions").is_dir() and (candidate / "pyproject.toml").is_file():
            return candidate
    raise UsageError("the image definitions are not here (no definitions/ folder)",
                     "run `hpcai-launch images build` from an hpcai checkout (or `make images`)")


def definition_path(root: Path, flavour: str, family: str) -> Path:
    path = root / "definitions" / flavour / f"{family}.def"
    if not path.is_file():
        raise UsageError(f"no definition {path.relative_to(root)}",
                         f"the families are: {', '.join(IMAGE_FAMILIES)}")
    return path


def detect_build_flavour() -> str:
    """The host's flavour: CUDA where an NVIDIA driver is, ROCm where the AMD
    kernel driver is, else CPU. A build host need not have a GPU, so the
    driver's files decide, not the management libraries."""
    if Path("/proc/driver/nvidia").exists() or shutil.which("nvidia-smi"):
        return "cuda"
    if Path("/dev/kfd").exists() or shutil.which("amd-smi") or shutil.which("rocm-smi"):
        return "rocm"
    return "cpu"


def export_source(root: Path, dest: Path) -> None:
    """The files git would commit, copied to dest (a plain copy without git)."""
    if (root / ".git").exists():
        listing = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=True).stdout.decode()
        files = [f for f in listing.split("\0") if f]
    else:
        skip = {".venv", "results", "images", "report", "bench/out", ".git"}
        files = [str(p.relative_to(root)) for p in root.rglob("*")
                 if p.is_file() and not any(str(p.relative_to(root)).startswith(s) for s in skip)]
    for name in files:
        source = root / name
        if source.is_file():  # a deleted, still tracked file is skipped
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def build_args(site: dict, flavour: str, family: str, source: Path, extra: dict[str, str]) -> dict:
    args = {
        "HPCAI_SRC": str(source),
        "HPCAI_VERSION": hpcai.__version__,
        "HPCAI_COMMIT": hpcai_commit() or "unknown",
        "HPCAI_WORKLOADS": ",".join(family_workloads(family)),
    }
    args.update({k: str(v) for k, v in site["images"].get("build_args", {}).items()})
    args.update(extra)
    return args


def build_one(site: dict, flavour: str, family: str, *, extra_args: dict[str, str],
              extra_binds: list[str], fakeroot: bool, force: bool, apptainer: Apptainer,
              echo=lambda line: print(line, file=sys.stderr, flush=True)) -> Path:
    root = repository_root()
    definition = definition_path(root, flavour, family)
    image = store.image_path(site, flavour, family)
    if image.exists() and not force:
        echo(f"hpcai: {image} exists; skipped (--force rebuilds it)")
        return image
    image.parent.mkdir(parents=True, exist_ok=True)
    logs = image.parent / "logs"
    logs.mkdir(exist_ok=True)
    log_path = logs / f"{store.image_name(flavour, family)}.build.log"
    # The copy lives beside the image: a folder the container runtime can see.
    with tempfile.TemporaryDirectory(dir=image.parent, prefix=".build-src-") as tmp:
        source = Path(tmp) / "hpcai"
        export_source(root, source)
        args = build_args(site, flavour, family, source, extra_args)
        binds = list(site["images"].get("build_binds", [])) + list(extra_binds)
        echo(f"hpcai: building {image.name} from {definition.relative_to(root)} "
             f"(commit {args['HPCAI_COMMIT'][:12]}); log: {log_path}")
        started = time.monotonic()
        # The copy's definition, not the checkout's: only the copy's folder is
        # known to be visible to the container runtime.
        apptainer.build(source / definition.relative_to(root), image, build_args=args,
                        binds=binds, fakeroot=fakeroot,
                        mksquashfs_args=site["images"].get("mksquashfs_args", []),
                        on_line=lambda line: echo(f"  {line}"), log_path=log_path)
    labels = store.hpcai_labels(apptainer.labels(image))
    expected = {"flavour": flavour, "family": family, "commit": args["HPCAI_COMMIT"]}
    wrong = {k: labels.get(k) for k, v in expected.items() if labels.get(k) != v}
    if wrong:
        raise ImageError(f"{image.name} was built but its labels are wrong: {wrong}",
                         f"check the %labels section of {definition.relative_to(root)}")
    size = os.path.getsize(image) / 2**20
    echo(f"hpcai: built {image} ({size:.0f} MiB, sha256 {store.sha256(image)[:12]}) "
         f"in {time.monotonic() - started:.0f} s")
    return image
