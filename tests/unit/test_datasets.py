"""Datasets on disk (`hpcai-launch data make`, `--data`): the manifest and its
checks, the writers' shapes, and nothing left behind by a refused write."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from hpcai.errors import UsageError
from hpcai.workloads import datasets


def test_jpeg_dataset_has_class_folders_and_a_manifest_that_adds_up(tmp_path):
    out = tmp_path / "ds"
    manifest = datasets.make("resnet50", "jpeg", {"image_size": 64}, 7, out, classes=3)
    files = sorted(out.glob("class-*/*.jpg"))
    assert len(files) == 7 and len(list(out.glob("class-*"))) == 3
    assert manifest["bytes"] == sum(f.stat().st_size for f in files)
    assert manifest["sample_shape"] == [3, 64, 64] and manifest["count"] == 7
    with Image.open(files[0]) as image:  # a real JPEG, larger than the crop
        assert image.format == "JPEG" and image.size[0] > 64
    assert datasets.load_manifest(out, "resnet50")["checksum"] == manifest["checksum"]


def test_npy_shards_take_their_shape_from_the_workload_and_split_by_size(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "SHARD_BYTES", 3 * 4 * 2 * 8 ** 3)  # three samples a shard
    out = tmp_path / "cubes"
    manifest = datasets.make("cosmoflow", "npy", {"cube": 8, "channels": 2}, 7, out, targets=4)
    assert manifest["sample_shape"] == [2, 8, 8, 8] and manifest["samples_per_shard"] == 3
    shards = sorted(p for p in out.glob("shard-*.npy") if not p.name.endswith("-y.npy"))
    sizes = [np.load(p, mmap_mode="r").shape for p in shards]
    assert sizes == [(3, 2, 8, 8, 8), (3, 2, 8, 8, 8), (1, 2, 8, 8, 8)]
    assert np.load(out / "shard-00000-y.npy").shape == (3, 4)
    assert manifest["bytes"] == sum(p.stat().st_size for p in out.iterdir()
                                    if p.name != datasets.MANIFEST)


def test_a_broken_or_foreign_manifest_is_refused_in_one_line(tmp_path):
    out = tmp_path / "ds"
    datasets.make("vit-l16", "jpeg", {"image_size": 32}, 2, out, classes=1)
    with pytest.raises(UsageError, match="holds a vit-l16 dataset, not resnet50's"):
        datasets.load_manifest(out, "resnet50")
    path = out / datasets.MANIFEST
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "count": 2000}))  # edited by hand
    with pytest.raises(UsageError, match="checksum does not match"):
        datasets.load_manifest(out, "vit-l16")
    path.write_text(path.read_text()[:40])  # truncated
    with pytest.raises(UsageError, match="is broken"):
        datasets.load_manifest(out, "vit-l16")
    path.unlink()
    with pytest.raises(UsageError, match="has no manifest.json"):
        datasets.load_manifest(out, "vit-l16")


def test_a_refused_or_failed_write_leaves_nothing(tmp_path, monkeypatch):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an empty folder"):
        datasets.make("resnet50", "jpeg", {"image_size": 32}, 2, busy)
    assert os.listdir(busy) == ["keep.txt"]

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(datasets.os, "replace", full_disk)  # the manifest's last step
    with pytest.raises(OSError):
        datasets.make("resnet50", "jpeg", {"image_size": 32}, 2, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_progress_is_reported_on_long_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "PROGRESS_S", 0.0)
    lines = []
    datasets.make("resnet50", "jpeg", {"image_size": 32}, 3, tmp_path / "ds", log=lines.append)
    assert lines[0].startswith("wrote 1/3 samples") and lines[-1].startswith("wrote 3 samples")
