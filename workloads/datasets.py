"""Datasets on disk for `--data DIR`: written by `hpcai-launch data make`, read
by the workload's input pipeline (workloads/input_pipeline.py).

Framework-free (PIL and NumPy, imported when used): the launcher writes and
checks datasets without importing PyTorch.

    DIR/manifest.json                      what the folder holds, with its checksum
    DIR/class-0000/000000.jpg ...          jpeg: one folder per class (ImageFolder layout)
    DIR/shard-00000.npy, shard-00000-y.npy npy: samples and targets, N per shard

The manifest is written last: a folder without one is an unfinished write.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from hpcai.safe_files import write_json
from hpcai.errors import UsageError

MANIFEST = "manifest.json"
KIND = "hpcai.dataset"
VERSION = 1
FORMATS = ("jpeg", "npy")
JPEG_QUALITY = 90
# Written a little larger than the trained size, as ImageNet's photos are, so
# the random resized crop has something to crop.
JPEG_MARGIN = 8 / 7
SHARD_BYTES = 256 * 2**20  # npy: samples per shard so that a shard is about this big
PROGRESS_S = 2.0


def sample_shape(data_format: str, p) -> list[int]:
    """The shape one sample has in training, from the workload's typed params
    (workloads/params.py): [3, S, S] images, or channels x cube^3 volumes."""
    if data_format == "jpeg":
        return [3, int(p.image_size), int(p.image_size)]
    return [int(p.channels), int(p.cube), int(p.cube), int(p.cube)]


def checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# ---- writing ------------------------------------------------------------------
def make(workload: str, data_format: str, params: dict, samples: int, out: Path, *,
         classes: int = 10, targets: int = 4, seed: int = 0, log=None) -> dict:
    """Write `samples` samples of the workload's shape into `out` (new or empty).
    On any failure the folder is removed if this call created it, emptied otherwise."""
    out = Path(out)
    if data_format not in FORMATS:
        raise UsageError(f"{workload} reads no dataset from storage",
                         "data make is for workloads that take --data")
    if samples < 1:
        raise UsageError("--samples must be at least 1", f"got {samples}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder",
                         "choose a new folder with -o, or remove it")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out} ({exc.strerror})", "choose another -o") from None
    from hpcai.workloads.catalog import get_workload

    shape = sample_shape(data_format, get_workload(workload).params.from_dict(params))
    progress = _Progress(samples, log)
    try:
        if data_format == "jpeg":
            total, files, extra = _write_jpeg(out, shape, samples, classes, seed, progress)
        else:
            total, files, extra = _write_npy(out, shape, samples, targets, seed, progress)
        manifest = {"kind": KIND, "version": VERSION, "workload": workload,
                    "format": data_format, "sample_shape": shape, "count": samples,
                    "files": files, "bytes": total, "seed": seed,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}
        manifest["checksum"] = checksum(manifest)
        write_json(out / MANIFEST, manifest, indent=2)
    except BaseException:
        _remove(out, created)
        raise
    progress.done(total)
    return manifest


def _remove(out: Path, created: bool) -> None:
    import shutil

    if created:
        shutil.rmtree(out, ignore_errors=True)
    else:
        for child in out.iterdir():
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()


class _Progress:
    """A line every few seconds on long writes: samples, bytes, write rate."""

    def __init__(self, total: int, log):
        self.total, self.log = total, log
        self.start = self.last = time.monotonic()

    def tick(self, written: int, nbytes: int) -> None:
        now = time.monotonic()
        if self.log is not None and now - self.last >= PROGRESS_S:
            self.last = now
            rate = nbytes / max(now - self.start, 1e-9) / 1e6
            self.log(f"wrote {written}/{self.total} samples ({nbytes / 1e6:.0f} MB, "
                     f"{rate:.0f} MB/s)")

    def done(self, nbytes: int) -> None:
        if self.log is not None:
            seconds = time.monotonic() - self.start
            self.log(f"wrote {self.total} samples, {nbytes / 1e6:.1f} MB in {seconds:.1f} s")


def _write_jpeg(out: Path, shape: list[int], samples: int, classes: int, seed: int,
                progress: _Progress) -> tuple[int, int, dict]:
    import numpy as np
    from PIL import Image

    if classes < 1:
        raise UsageError("--classes must be at least 1", f"got {classes}")
    rng = np.random.default_rng(seed)
    side = max(8, round(shape[1] * JPEG_MARGIN))
    total = 0
    for c in range(classes):
        (out / f"class-{c:04d}").mkdir()
    for i in range(samples):
        # Smooth colour fields plus grain: compresses like a photograph (tens of KB
        # at 256x256), not like white noise (which JPEG cannot compress).
        coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        image = Image.fromarray(coarse).resize((side, side), Image.BILINEAR)
        pixels = np.asarray(image, dtype=np.int16) + rng.integers(-12, 13, (side, side, 3))
        path = out / f"class-{i % classes:04d}" / f"{i:07d}.jpg"
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=JPEG_QUALITY)
        total += path.stat().st_size
        progress.tick(i + 1, total)
    return total, samples, {"classes": classes, "stored_size": [side, side],
                            "jpeg_quality": JPEG_QUALITY}


def _write_npy(out: Path, shape: list[int], samples: int, targets: int, seed: int,
               progress: _Progress) -> tuple[int, int, dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    per_sample = 4 * int(np.prod(shape))
    per_shard = max(1, min(samples, SHARD_BYTES // per_sample))
    total, files, written = 0, 0, 0
    while written < samples:
        n = min(per_shard, samples - written)
        base = out / f"shard-{files // 2:05d}"
        x = np.lib.format.open_memmap(f"{base}.npy", mode="w+", dtype=np.float32,
                                      shape=(n, *shape))
        for j in range(n):  # one sample at a time: a shard need not fit in memory
            x[j] = rng.standard_normal(shape, dtype=np.float32)
        x.flush()
        del x
        np.save(f"{base}-y.npy", rng.uniform(-1, 1, (n, targets)).astype(np.float32))
        total += Path(f"{base}.npy").stat().st_size + Path(f"{base}-y.npy").stat().st_size
        files += 2
        written += n
        progress.tick(written, total)
    return total, files, {"samples_per_shard": per_shard, "targets": targets, "dtype": "float32"}


# ---- reading ------------------------------------------------------------------
def load_manifest(folder, workload: str | None = None) -> dict:
    """The folder's manifest, checked: readable, whole, unaltered, this workload's.
    A UsageError that says what is wrong otherwise."""
    folder = Path(folder)
    hint = f"write one with `hpcai-launch data make {workload or 'WORKLOAD'} -o DIR`"
    if not folder.is_dir():
        raise UsageError(f"--data {folder} is not a folder", hint)
    if not os.access(folder, os.R_OK | os.X_OK):
        raise UsageError(f"--data {folder} is not readable", "check its permissions")
    path = folder / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{folder} has no {MANIFEST} (not a dataset, or its write did not "
                         "finish)", hint) from None
    except PermissionError:
        raise UsageError(f"{path} is not readable", "check its permissions") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is broken ({exc.__class__.__name__}: "
                         f"{' '.join(str(exc).split())})", hint) from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UsageError(f"{path} is not an hpcai dataset manifest", hint)
    if doc.get("checksum") != checksum(doc):
        raise UsageError(f"{path} is broken: its checksum does not match its content "
                         "(edited or truncated)", hint)
    missing = [k for k in ("workload", "format", "sample_shape", "count", "bytes")
               if k not in doc]
    if missing:
        raise UsageError(f"{path} lacks {', '.join(missing)}", hint)
    if workload is not None and doc["workload"] != workload:
        raise UsageError(f"{folder} holds a {doc['workload']} dataset, not {workload}'s",
                         f"make one with `hpcai-launch data make {workload} -o DIR`")
    return doc


def larger_than_memory(nbytes: int) -> bool | None:
    """Whether the dataset cannot all stay in this node's page cache."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return nbytes > int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def log_stderr(message: str) -> None:
    print(f"hpcai: {message}", file=sys.stderr, flush=True)
